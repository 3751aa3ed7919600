//! Checks of how a completion queue wakes an owner that sleeps when idle: through the CQ's
//! completion channel descriptor where the provider has one
//! ([`CompletionQueue::wait_fd`], armed by [`CompletionQueue::arm_notify`]), else through the
//! in-process notice ([`CompletionQueue::set_notify`]).
//!
//! Normal operation: the check connects its own pair, arms the receiver's CQ, has a thread
//! sleep on the descriptor and sends; the completion must wake it. Recovery: the pair is torn
//! down by its drop, the channel events acknowledged first.

use std::sync::atomic::{AtomicU64, Ordering};

use super::*;

/// Sleeps in `poll(2)` on `fd` for up to `ms` milliseconds; whether it became readable.
fn readable(fd: std::os::fd::RawFd, ms: i32) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one live pollfd.
    let n = unsafe { libc::poll(&mut p, 1, ms) };
    n == 1 && p.revents & libc::POLLIN != 0
}

/// A completion wakes a sleeper: on a descriptor, only once armed (one event per arm, taken
/// and acknowledged by `consume_events`); in-process, by running the notice.
pub fn completion_wakes_sleeper<E: Env>(env: &mut E) -> CheckResult {
    let mut p = connect(env)?;
    let sb = Buf::<E::P>::new(&p.c.pd, 4096, LW)?;
    let rb = Buf::<E::P>::new(&p.s.pd, 4096, LW)?;
    let Some(fd) = p.s.cq.wait_fd() else {
        let seen = Arc::new(AtomicU64::new(0));
        let s2 = Arc::clone(&seen);
        ensure!(
            p.s.cq.set_notify(Arc::new(move || {
                // Relaxed: a count read after the completion was polled.
                s2.fetch_add(1, Ordering::Relaxed);
            })),
            "the CQ has neither a completion channel nor an in-process notice"
        );
        post_recv::<E::P>(&mut p.s.qp, 1, &[rb.sge(0, 64)])?;
        post_send::<E::P>(&mut p.c.qp, SendWr::send(2, &[sb.sge(0, 64)]))?;
        wait_wc(env, &mut p.s.cq)?;
        ensure!(
            seen.load(Ordering::Relaxed) >= 1,
            "no notice for a completion"
        );
        return Ok(());
    };
    ensure!(
        p.s.cq.arm_notify().map_err(e2s)?,
        "arm_notify armed nothing"
    );
    ensure!(
        !readable(fd, 0),
        "the descriptor is readable with no completion"
    );
    post_recv::<E::P>(&mut p.s.qp, 1, &[rb.sge(0, 64)])?;
    post_recv::<E::P>(&mut p.s.qp, 3, &[rb.sge(64, 64)])?;
    let waiter = std::thread::spawn(move || readable(fd, 20_000));
    post_send::<E::P>(&mut p.c.qp, SendWr::send(2, &[sb.sge(0, 64)]))?;
    ensure!(
        waiter.join().unwrap_or(false),
        "the completion did not wake the sleeper"
    );
    ensure!(
        p.s.cq.consume_events() >= 1,
        "no channel event to acknowledge"
    );
    expect_wc(&wait_wc(env, &mut p.s.cq)?, 1, WcStatus::SUCCESS, None)?;
    // Not armed again: the next completion makes no event.
    post_send::<E::P>(&mut p.c.qp, SendWr::send(4, &[sb.sge(0, 64)]))?;
    expect_wc(&wait_wc(env, &mut p.s.cq)?, 3, WcStatus::SUCCESS, None)?;
    ensure!(
        !readable(fd, 0),
        "a completion made an event without an arm"
    );
    Ok(())
}
