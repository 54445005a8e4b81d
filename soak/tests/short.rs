//! The short soak (the README's test command runs it): a durable 3-voter cluster on SeaweedFS
//! through six rounds of small and staged large appends, snapshots, retention, deletes, a
//! purge, a restart and SIGKILLs. Every acknowledged byte reads back, the purged streams are
//! gone, and no stream's replicated state passes the spec's 32 KiB.

use ursula_soak::cluster::SoakCluster;
use ursula_soak::run;
use ursula_soak::spec::Spec;

#[test]
fn a_short_soak_reads_every_acknowledged_byte_back_and_keeps_stream_state_bounded() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let dir = ursula_testkit::scratch::Scratch::new("soak-short");
    let spec = Spec::short();
    let mut cluster = rt.block_on(SoakCluster::start(dir, spec.log_budget));
    let report = run::run(&spec, &mut cluster, &rt).expect("the soak runs to its end");
    eprintln!("{}", run::header_rows());
    for r in &report.rounds {
        eprintln!("{}", run::row(r));
    }
    assert!(report.mismatches.is_empty(), "{:#?}", report.mismatches);
    assert_eq!(report.rounds.len(), spec.rounds);
    let last = report.rounds.last().expect("a round");
    assert!(report.verified_bytes > 10 << 20, "{report:?}");
    assert!(
        report.purged_checked > 0,
        "a bucket was purged and checked gone"
    );
    let state_max = report.state_max();
    assert!(
        state_max > 0 && state_max < 32 << 10,
        "stream state {state_max} B"
    );
    let staged: u64 = report
        .rounds
        .iter()
        .map(|r| r.nodes.iter().map(|n| n.staged).max().unwrap_or(0))
        .max()
        .unwrap_or(0);
    assert!(staged > 0, "large appends were staged in the object store");
    assert!(
        last.bucket.raft_snapshots > 0,
        "Raft snapshots went to S3: {last:?}"
    );
    assert!(last.bucket.objects > 0 && last.live > 0, "{last:?}");
}
