//! The status monitor's part: SM_NOTIFY of a rebooted client frees its locks (over UDP, as
//! `sm-notify` sends it), and a restarted server tells the hosts that held locks (SM_NOTIFY
//! to a status monitor of our own) and serves only reclaims in its grace period; the host
//! records refuse corrupt files.

use std::net::{SocketAddr, UdpSocket};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rpcrdma_engine::rpc::{decode_reply, AcceptStat, ReplyBody};

use super::nsm::{self, SM_NOTIFY, SM_PROG};
use super::proto::{self, Stat};
use super::records::{self, Records, RecordsError};
use super::tests::{call_lock, call_test, client_of, exports, the_lock, wait_for, Rpcbind};
use super::{NlmConfig, NlmServer};
use crate::nfs::rpc_tcp::{
    encode_call_msg, CallCtx, ClientAuth, Handled, RpcService, ServerConfig, TcpRpcServer, XdrBuf,
};
use crate::nfs::rpcbind::universal_addr;
use crate::nfs::types::Fh;

fn local() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

/// SM_NOTIFY over UDP to `at` from a socket of 127.0.0.1; the reply's accept status.
fn notify_udp(at: SocketAddr, name: &[u8]) -> AcceptStat {
    let s = UdpSocket::bind(local()).expect("udp");
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let msg = encode_call_msg(
        77,
        SM_PROG,
        1,
        SM_NOTIFY,
        ClientAuth::None,
        &nsm::encode_notify(name, 5),
    )
    .expect("call");
    s.send_to(&msg, at).expect("send");
    let mut b = [0u8; 512];
    let (n, _) = s.recv_from(&mut b).expect("reply");
    let (h, _) = decode_reply(&b[..n]).expect("reply decodes");
    assert_eq!(h.xid, 77);
    match h.body {
        ReplyBody::Accepted { stat, .. } => stat,
        other => panic!("{other:?}"),
    }
}

fn server(cfg: NlmConfig) -> (NlmServer, Fh) {
    let (table, f, _, _, _) = exports();
    let nlm =
        NlmServer::start(local(), Arc::new(move || Arc::clone(&table)), cfg, None).expect("nlm");
    (nlm, f)
}

#[test]
fn accepts_sm_notify_of_a_rebooted_client_as_its_locks_released() {
    let (nlm, f) = server(NlmConfig {
        rpcbind_port: 9,
        ..NlmConfig::default()
    });
    let (udp, _) = nlm.nsm_addrs().expect("NSM served");
    let mut c = client_of(&nlm, ClientAuth::SysRoot);
    assert_eq!(
        call_lock(&mut c, the_lock(&f, 1, 0, 0), false, true, false),
        Stat::GRANTED
    );
    // Another name at this address is another host: nothing goes.
    assert_eq!(notify_udp(udp, b"someone-else"), AcceptStat::Success);
    assert_eq!(nlm.sizes().locks, 1);
    assert_eq!(notify_udp(udp, b"client-1"), AcceptStat::Success);
    assert_eq!(nlm.sizes().locks, 0, "client-1 rebooted");
    assert_eq!(
        call_lock(&mut c, the_lock(&f, 1, 0, 0), false, true, false),
        Stat::GRANTED
    );
    // The address written out names every host there.
    assert_eq!(notify_udp(udp, b"127.0.0.1"), AcceptStat::Success);
    assert_eq!(nlm.sizes(), super::TableSizes::default());
    assert_eq!(
        call_test(&mut c, the_lock(&f, 2, 0, 0), true).0,
        Stat::GRANTED
    );
}

/// A status monitor recording the SM_NOTIFY calls it gets (name, state).
#[derive(Default)]
struct Statd(Mutex<Vec<(Vec<u8>, u32)>>);

impl RpcService for Statd {
    fn program(&self) -> u32 {
        SM_PROG
    }
    fn versions(&self) -> (u32, u32) {
        (1, 1)
    }
    fn call(&self, _: &CallCtx, p: u32, args: &[u8], _: &mut XdrBuf) -> Handled {
        let st = match (p, nsm::decode_notify(args)) {
            (SM_NOTIFY, Some((name, state))) => {
                self.0
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push((name.to_vec(), state));
                AcceptStat::Success
            }
            _ => AcceptStat::GarbageArgs,
        };
        st.into()
    }
}

#[test]
fn accepts_a_restart_telling_the_hosts_that_held_locks_and_serving_their_reclaims() {
    let dir = std::env::temp_dir().join(format!("rpcrdma-nlm-restart-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let statd = Arc::new(Statd::default());
    let sd = TcpRpcServer::start(local(), statd.clone(), ServerConfig::default()).expect("statd");
    let rb = Arc::new(Rpcbind(vec![(SM_PROG, universal_addr(&sd.local_addr()))]));
    let rb = TcpRpcServer::start(local(), rb, ServerConfig::default()).expect("rpcbind");
    let cfg = NlmConfig {
        state_dir: Some(dir.clone()),
        rpcbind_port: rb.local_addr().port(),
        restart_grace: Duration::from_secs(600),
        mon_name: Some("server-name".into()),
        ..NlmConfig::default()
    };
    let (nlm, f) = server(cfg.clone());
    assert!(!nlm.in_grace(), "a first start has no one to tell");
    let mut c = client_of(&nlm, ClientAuth::SysRoot);
    assert_eq!(
        call_lock(&mut c, the_lock(&f, 1, 0, 0), false, true, false),
        Stat::GRANTED
    );
    let kept = records::load(&dir).expect("records");
    assert_eq!(kept.hosts.len(), 1);
    assert_eq!(kept.hosts[0].name, b"client-1");
    assert_eq!(kept.state % 2, 1, "odd: up");
    drop(c);
    nlm.stop();

    let (nlm, f) = server(cfg);
    assert!(nlm.in_grace());
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        statd.0.lock().unwrap_or_else(|e| e.into_inner()).is_empty(),
        "not before it is told to"
    );
    nlm.tell_restart();
    wait_for("SM_NOTIFY", || {
        !statd.0.lock().unwrap_or_else(|e| e.into_inner()).is_empty()
    });
    let got = statd.0.lock().unwrap_or_else(|e| e.into_inner()).clone();
    assert_eq!(got, vec![(b"server-name".to_vec(), kept.state + 2)]);
    let mut c = client_of(&nlm, ClientAuth::SysRoot);
    let l = the_lock(&f, 1, 0, 0);
    assert_eq!(
        call_lock(&mut c, l, false, true, false),
        Stat::DENIED_GRACE_PERIOD
    );
    assert_eq!(
        call_lock(&mut c, l, false, true, true),
        Stat::GRANTED,
        "the reclaim"
    );
    let st = nlm.stats();
    let get = super::NlmStats::get;
    assert_eq!((get(&st.reclaims), get(&st.grace_denied)), (1, 1));
    assert!(
        records::load(&dir).expect("records").hosts.len() == 1,
        "kept again"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn rejects_host_records_that_are_cut_corrupt_or_oversized() {
    let r = Records {
        state: 7,
        hosts: vec![
            super::locks::HostKey {
                addr: "10.0.0.1".parse().expect("ip"),
                name: b"a".to_vec(),
            },
            super::locks::HostKey {
                addr: "fe80::1".parse().expect("ip"),
                name: vec![b'x'; 1024],
            },
        ],
    };
    let b = records::encode(&r);
    assert_eq!(records::decode(&b), Ok(r));
    for cut in [0, 8, 20, b.len() - 1] {
        assert_eq!(
            records::decode(&b[..cut]),
            Err(RecordsError::Corrupt),
            "cut at {cut}"
        );
    }
    let mut flipped = b.clone();
    flipped[17] ^= 1;
    assert_eq!(records::decode(&flipped), Err(RecordsError::Corrupt));
    assert_eq!(records::next_state(0), 1);
    assert_eq!(records::next_state(1), 3);
    assert_eq!(records::next_state(4), 5);
    // NM_LOCK asks for no monitoring: its host is not kept.
    let dir = std::env::temp_dir().join(format!("rpcrdma-nlm-nm-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let (nlm, f) = server(NlmConfig {
        state_dir: Some(dir.clone()),
        rpcbind_port: 9,
        ..NlmConfig::default()
    });
    let mut c = client_of(&nlm, ClientAuth::SysRoot);
    let a = proto::LockArgs {
        cookie: b"n",
        block: false,
        exclusive: true,
        lock: the_lock(&f, 1, 0, 0),
        reclaim: false,
        state: 0,
    };
    let res = c
        .call(proto::NLM_PROG, 4, proto::NM_LOCK, &proto::encode_lock(&a))
        .expect("NM_LOCK");
    assert_eq!(proto::decode_res(&res).expect("res").1, Stat::GRANTED);
    assert!(records::load(&dir).expect("records").hosts.is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}
