fn main() {
    println!("rpcrdma");
}
