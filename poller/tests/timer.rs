//! Timer wheel: ordering, cancel, stale handles, timers longer than the wheel, many timers in one
//! bucket, capacity, `next_deadline`, and a randomized comparison with a simple model.

use rpcrdma_poller::{TimerError, TimerHandle, TimerWheel};
use std::collections::BTreeMap;

struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
}

#[test]
fn rejects_bad_config() {
    assert_eq!(
        TimerWheel::<u64>::new(0, 8, 10).unwrap_err(),
        TimerError::BadConfig
    );
    assert_eq!(
        TimerWheel::<u64>::new(4, 6, 10).unwrap_err(),
        TimerError::BadConfig
    );
    assert_eq!(
        TimerWheel::<u64>::new(4, 0, 10).unwrap_err(),
        TimerError::BadConfig
    );
    assert_eq!(
        TimerWheel::<u64>::new(4, 8, 0).unwrap_err(),
        TimerError::BadConfig
    );
    assert_eq!(
        TimerWheel::<u64>::new(usize::MAX, 8, 1).unwrap_err(),
        TimerError::BadConfig
    );
    let w = TimerWheel::<u64>::new(4, 8, 10).unwrap();
    assert_eq!((w.capacity(), w.tick_ns(), w.span_ns()), (4, 10, 80));
}

#[test]
fn accepts_firing_in_deadline_order_at_first_call_past_deadline() {
    // 16 buckets of 100 ns: a 1600 ns revolution; deadlines up to 5000 ns wrap around it.
    let mut w = TimerWheel::<u64>::new(256, 16, 100).unwrap();
    let mut rng = Lcg(11);
    let mut deadlines = Vec::new();
    for i in 0..200 {
        // Distinct ticks so the order is fully defined.
        let d = (rng.next() % 5000) / 100 * 100 + 100 + i % 100;
        if deadlines.iter().any(|&x: &u64| x / 100 == d / 100) {
            continue;
        }
        deadlines.push(d);
        w.arm(d, d).unwrap();
    }
    let mut fired = Vec::new();
    let mut prev = 0;
    let mut now = 0;
    while now <= 6_000 {
        w.expire(now, |d| {
            // Fires at the first call at or after its deadline.
            assert!(
                d <= now && d > prev,
                "deadline {d} fired at {now} (previous call {prev})"
            );
            fired.push(d);
        });
        prev = now;
        now += 37;
    }
    let mut sorted = deadlines.clone();
    sorted.sort_unstable();
    assert_eq!(fired, sorted);
    assert!(w.is_empty());
}

#[test]
fn accepts_cancel_before_expiry() {
    let mut w = TimerWheel::<u32>::new(8, 8, 10).unwrap();
    let a = w.arm(50, 1).unwrap();
    let b = w.arm(50, 2).unwrap();
    let c = w.arm(55, 3).unwrap();
    assert_eq!(w.len(), 3);
    assert_eq!(w.cancel(b), Some(2));
    assert!(w.is_armed(a) && !w.is_armed(b) && w.is_armed(c));
    let mut got = Vec::new();
    assert_eq!(w.expire(100, |t| got.push(t)), 2);
    assert_eq!(got, [1, 3]);
}

#[test]
fn rejects_stale_handle() {
    let mut w = TimerWheel::<u32>::new(1, 8, 10).unwrap();
    let a = w.arm(10, 1).unwrap();
    assert_eq!(w.cancel(a), Some(1));
    // Cancelled: a second cancel is a no-op.
    assert_eq!(w.cancel(a), None);
    // The single entry is reused by a new timer; the old handle must not touch it.
    let b = w.arm(20, 2).unwrap();
    assert_ne!(a, b);
    assert_eq!(w.cancel(a), None);
    assert!(!w.rearm(a, 5));
    assert_eq!(w.deadline(a), None);
    assert_eq!(w.token(a), None);
    assert!(w.is_armed(b));
    // Fired: the handle goes stale too.
    assert_eq!(w.expire(20, |_| {}), 1);
    assert_eq!(w.cancel(b), None);
    // Made-up handles are at worst stale.
    assert_eq!(w.cancel(TimerHandle::from_raw(u64::MAX)), None);
    assert_eq!(w.cancel(TimerHandle::from_raw(12345 << 32)), None);
    assert_eq!(TimerHandle::from_raw(b.to_raw()), b);
}

#[test]
fn accepts_long_timers_beyond_span() {
    // 8 buckets of 10 ns: one revolution is 80 ns.
    let mut w = TimerWheel::<u64>::new(16, 8, 10).unwrap();
    for d in [1_000, 85, 165, 80 * 50 + 5, 7] {
        w.arm(d, d).unwrap();
    }
    assert_eq!(w.next_deadline(), Some(7));
    let mut fired = Vec::new();
    let mut prev = 0;
    let mut now = 0;
    while now < 5_000 {
        now += 7;
        w.expire(now, |d| {
            assert!(d <= now && d > prev, "{d} at {now}");
            fired.push(d);
        });
        prev = now;
    }
    assert_eq!(fired, [7, 85, 165, 1_000, 4_005]);
    // A jump of many revolutions at once fires everything due.
    for d in [300, 9_000, 10_000_000] {
        w.arm(d, d).unwrap();
    }
    // 300 is already past (placed at the cursor), so it is the earliest.
    assert_eq!(w.next_deadline(), Some(300));
    let mut got = Vec::new();
    w.expire(20_000_000, |d| got.push(d));
    got.sort_unstable();
    assert_eq!(got, [300, 9_000, 10_000_000]);
}

#[test]
fn accepts_many_timers_in_one_bucket() {
    let mut w = TimerWheel::<u32>::new(1024, 8, 10).unwrap();
    // Same deadline: fire in arm order.
    for i in 0..500 {
        w.arm(40, i).unwrap();
    }
    // Same bucket, later rounds (80 ns apart): fire at their own time.
    for r in 1..=5u32 {
        w.arm(40 + 80 * u64::from(r), 1000 + r).unwrap();
    }
    let mut got = Vec::new();
    assert_eq!(w.expire(40, |t| got.push(t)), 500);
    assert_eq!(got, (0..500).collect::<Vec<_>>());
    for r in 1..=5u32 {
        let now = 40 + 80 * u64::from(r);
        let mut got = Vec::new();
        w.expire(now - 1, |t| got.push(t));
        assert!(got.is_empty());
        w.expire(now, |t| got.push(t));
        assert_eq!(got, [1000 + r]);
    }
}

#[test]
fn rejects_arm_when_full() {
    let mut w = TimerWheel::<u8>::new(3, 4, 10).unwrap();
    for i in 0..3 {
        w.arm(100, i).unwrap();
    }
    assert_eq!(w.arm(100, 9).unwrap_err(), TimerError::Full);
    assert_eq!(w.expire(100, |_| {}), 3);
    // Entries come back after expiry.
    w.arm(200, 4).unwrap();
}

#[test]
fn accepts_expire_max_resuming_where_it_stopped() {
    // 64 buckets of 10 ns: every deadline (0..150) is within one revolution, so the order is
    // the deadline order.
    let mut w = TimerWheel::<u32>::new(64, 64, 10).unwrap();
    for i in 0..50 {
        w.arm(u64::from(i) * 3, i).unwrap();
    }
    let mut got = Vec::new();
    assert_eq!(w.expire_max(500, 20, |t| got.push(t)), 20);
    assert_eq!(w.expire_max(500, 20, |t| got.push(t)), 20);
    assert_eq!(w.expire_max(500, 20, |t| got.push(t)), 10);
    assert_eq!(w.expire_max(500, 20, |t| got.push(t)), 0);
    assert_eq!(got, (0..50).collect::<Vec<_>>());
}

#[test]
fn accepts_past_deadlines_and_time_going_back() {
    let mut w = TimerWheel::<u32>::new(8, 8, 10).unwrap();
    assert_eq!(w.expire(1_000, |_| {}), 0);
    // Already due: fires at the next call.
    w.arm(5, 1).unwrap();
    assert_eq!(w.next_deadline(), Some(5));
    let mut got = Vec::new();
    w.expire(1_000, |t| got.push(t));
    assert_eq!(got, [1]);
    // The clock going backwards fires nothing that is not due.
    w.arm(1_500, 2).unwrap();
    w.arm(900, 3).unwrap();
    w.expire(500, |t| got.push(t));
    assert_eq!(got, [1]);
    w.expire(950, |t| got.push(t));
    assert_eq!(got, [1, 3]);
    w.expire(1_500, |t| got.push(t));
    assert_eq!(got, [1, 3, 2]);
}

#[test]
fn accepts_rearm_keeping_the_handle() {
    let mut w = TimerWheel::<u32>::new(8, 8, 10).unwrap();
    let h = w.arm(50, 7).unwrap();
    assert!(w.rearm(h, 500));
    assert_eq!(w.deadline(h), Some(500));
    assert_eq!(w.expire(100, |_| {}), 0);
    assert!(w.rearm(h, 120));
    let mut got = Vec::new();
    w.expire(130, |t| got.push(t));
    assert_eq!(got, [7]);
    assert!(!w.rearm(h, 1));
}

#[test]
fn accepts_random_operations_like_a_model() {
    let mut w = TimerWheel::<u64>::new(128, 16, 50).unwrap();
    // token -> (handle, deadline)
    let mut model: BTreeMap<u64, (TimerHandle, u64)> = BTreeMap::new();
    let mut rng = Lcg(5);
    let mut now = 0u64;
    let mut token = 0u64;
    let ops = if cfg!(miri) { 300 } else { 20_000 };
    for _ in 0..ops {
        match rng.next() % 10 {
            0..=4 => {
                // Mostly short timers, some beyond the 800 ns revolution, some already due.
                let d = match rng.next() % 4 {
                    0 => now.saturating_sub(rng.next() % 100),
                    1 => now + rng.next() % 5_000,
                    _ => now + rng.next() % 700,
                };
                match w.arm(d, token) {
                    Ok(h) => {
                        model.insert(token, (h, d));
                    }
                    Err(TimerError::Full) => assert_eq!(model.len(), 128),
                    Err(e) => panic!("{e}"),
                }
                token += 1;
            }
            5 | 6 => {
                if let Some((&t, &(h, _))) =
                    model.iter().nth(rng.next() as usize % model.len().max(1))
                {
                    assert_eq!(w.cancel(h), Some(t));
                    model.remove(&t);
                    assert_eq!(w.cancel(h), None);
                }
            }
            _ => {
                now += rng.next() % 300;
                assert_eq!(
                    w.next_deadline(),
                    model.values().map(|&(_, d)| d).min(),
                    "next_deadline"
                );
                let mut fired = Vec::new();
                w.expire(now, |t| fired.push(t));
                fired.sort_unstable();
                let due: Vec<u64> = model
                    .iter()
                    .filter(|(_, &(_, d))| d <= now)
                    .map(|(&t, _)| t)
                    .collect();
                assert_eq!(fired, due, "at {now}");
                for t in due {
                    model.remove(&t);
                }
            }
        }
        assert_eq!(w.len(), model.len());
    }
}
