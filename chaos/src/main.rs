//! `ursula-chaos`: runs seeded fault schedules against a cluster and checks each history.

fn main() {}
