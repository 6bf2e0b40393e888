use super::*;

#[test]
fn pauses_double_with_jitter_up_to_the_cap_and_start_over_after_a_steady_session() {
    let mut backoff = Backoff::new();
    let pauses: Vec<Duration> = (0..8).map(|_| backoff.after(None, 0.5)).collect();
    assert_eq!(pauses[0], FIRST_PAUSE);
    assert_eq!(pauses[1], FIRST_PAUSE * 2);
    assert_eq!(*pauses.last().unwrap(), MAX_PAUSE);
    assert_eq!(backoff.after(None, 0.0), MAX_PAUSE.mul_f64(0.75));
    assert_eq!(backoff.after(Some(MAX_PAUSE), 0.5), FIRST_PAUSE);
    let j = jitter();
    assert!((0.0..1.0).contains(&j));
}
