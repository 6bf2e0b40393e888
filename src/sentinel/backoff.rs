//! The pause before a Sentinel's failover events are listened to again
//! (`super::monitor`, one thread per Sentinel), and before the topology
//! thread tries its list again after a round of failures: a Sentinel
//! that fails, refuses the subscription, or accepts it (and serves) and
//! closes soon after, must not get a new connection after another.
use std::time::Duration;

/// The first pause, and the least there is between two connections to
/// one Sentinel.
pub(crate) const FIRST_PAUSE: Duration = Duration::from_millis(500);
/// The longest pause; a subscription that lasted this long was steady,
/// and its end starts the pauses over.
pub(crate) const MAX_PAUSE: Duration = Duration::from_secs(5);

pub(crate) struct Backoff {
    pause: Duration,
}

impl Backoff {
    pub(crate) fn new() -> Self {
        Backoff { pause: FIRST_PAUSE }
    }

    /// Whether a connection subscribed for `served` (None: it never was)
    /// was steady: it lasted [`MAX_PAUSE`] at least. A shorter one is a
    /// failure, however well it began.
    pub(crate) fn is_steady(served: Option<Duration>) -> bool {
        served.is_some_and(|served| served >= MAX_PAUSE)
    }

    /// The pause after a connection that ended, subscribed for `served`
    /// (None: it never was): doubled after each short one, up to
    /// [`MAX_PAUSE`], and back to [`FIRST_PAUSE`] after a steady one.
    pub(crate) fn after(&mut self, served: Option<Duration>) -> Duration {
        if Self::is_steady(served) {
            self.pause = FIRST_PAUSE;
        }
        let pause = self.pause;
        self.pause = (self.pause * 2).min(MAX_PAUSE);
        pause
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(ms: u64) -> Duration {
        Duration::from_millis(ms)
    }

    #[test]
    fn failures_double_the_pause_up_to_its_bound() {
        let mut backoff = Backoff::new();
        let pauses: Vec<Duration> = (0..6).map(|_| backoff.after(None)).collect();
        assert_eq!(
            pauses,
            [ms(500), ms(1000), ms(2000), ms(4000), ms(5000), ms(5000)]
        );
    }

    /// A Sentinel that acknowledges the subscription and closes at once
    /// (or fails a PING) is no steady one: it gets the same pauses.
    #[test]
    fn a_short_subscription_does_not_reset_the_pause() {
        let mut backoff = Backoff::new();
        assert_eq!(backoff.after(Some(ms(10))), ms(500));
        assert_eq!(backoff.after(Some(ms(10))), ms(1000));
        assert_eq!(backoff.after(Some(ms(4999))), ms(2000));
    }

    #[test]
    fn a_steady_subscription_starts_the_pauses_over() {
        let mut backoff = Backoff::new();
        for _ in 0..5 {
            backoff.after(None);
        }
        assert_eq!(backoff.after(Some(Duration::from_secs(60))), ms(500));
        assert_eq!(backoff.after(None), ms(1000));
    }
}
