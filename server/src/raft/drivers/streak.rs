//! A health gate's streaks: `unhealthy` bad ticks with no good one between them shed the node,
//! and `heal` good ticks in a row let it lead again. The store gate and the cluster-egress
//! gate each keep one.

/// What a tick changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    None,
    /// The bad streak reached the gate's unhealthy ticks: shed.
    Shed,
    /// The good streak reached the gate's heal ticks: may lead again.
    Healed,
}

#[derive(Debug, Clone)]
pub struct Streak {
    unhealthy: u32,
    heal: u32,
    bad: u32,
    good: u32,
    shed: bool,
}

impl Streak {
    pub fn new(unhealthy: u32, heal: u32) -> Streak {
        Streak {
            unhealthy,
            heal,
            bad: 0,
            good: 0,
            shed: false,
        }
    }

    pub fn shed(&self) -> bool {
        self.shed
    }

    /// Bad ticks since the last good one.
    pub fn bad(&self) -> u32 {
        self.bad
    }

    /// Records a bad tick.
    pub fn bad_tick(&mut self) -> Change {
        self.good = 0;
        self.bad = self.bad.saturating_add(1);
        if !self.shed && self.bad >= self.unhealthy {
            self.shed = true;
            Change::Shed
        } else {
            Change::None
        }
    }

    /// Records a good tick.
    pub fn good_tick(&mut self) -> Change {
        self.bad = 0;
        self.good = self.good.saturating_add(1);
        if self.shed && self.good >= self.heal {
            self.shed = false;
            Change::Healed
        } else {
            Change::None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_streak_sheds_at_its_unhealthy_ticks_and_heals_at_its_heal_ticks_in_a_row() {
        let mut s = Streak::new(3, 2);
        assert_eq!(s.bad_tick(), Change::None);
        assert_eq!(s.bad_tick(), Change::None);
        assert_eq!(
            s.good_tick(),
            Change::None,
            "a good tick ends the bad streak"
        );
        assert_eq!(s.bad_tick(), Change::None);
        assert_eq!(s.bad_tick(), Change::None);
        assert_eq!(s.bad_tick(), Change::Shed);
        assert!(s.shed() && s.bad() == 3);
        assert_eq!(s.bad_tick(), Change::None, "shed once per streak");
        assert_eq!(s.good_tick(), Change::None);
        assert_eq!(
            s.bad_tick(),
            Change::None,
            "a bad tick ends the good streak"
        );
        assert_eq!(s.good_tick(), Change::None);
        assert_eq!(s.good_tick(), Change::Healed);
        assert!(!s.shed());
    }
}
