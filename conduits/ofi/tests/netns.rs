//! Multi-host conformance on one machine (issue 5, point 7): two network namespaces
//! joined by a veth pair stand for two hosts, and a 4-rank job with 2 ranks in each
//! namespace runs the core AM conformance suite and the RMA suite over libfabric's
//! `tcp;ofi_rxm` in hybrid mode (the default for such a job): the two ranks of a
//! namespace talk through shared memory, the namespaces through the veth.
//! `paths_are_counted` checks with `Hybrid::stats()` that same-host requests went through
//! the rings and cross-host ones through libfabric; `loopback_only_is_a_clear_error`
//! runs a job in two namespaces that have only `lo` and checks it fails promptly with a
//! message naming the provider, instead of hanging in the wire-up.
//!
//! Every test (one per conformance case) makes its own pair, named after this process
//! and a counter so that parallel tests and parallel runs never clash:
//!
//! | namespace | veth end | address |
//! |---|---|---|
//! | `gexns<pid>_<n>a` | `gxv<pid>_<n>a` | 10.77.0.1/24 |
//! | `gexns<pid>_<n>b` | `gxv<pid>_<n>b` | 10.77.0.2/24 |
//!
//! with `lo` up in each and no IPv6 address on the veth (`addrgenmode none`). Both veth
//! ends are created directly inside their namespaces, so nothing is ever added to the
//! machine's own network namespace; the test waits until both ends have carrier, since
//! libfabric's tcp provider does not offer an interface that is not running yet. The job runs
//! through `gex_boot`'s host list: ranks 0 and 1 on the first namespace, ranks 2 and 3
//! on the second, each started as `ip netns exec <namespace> <this test binary> …`.
//! Each rank checks that the conduit opened the veth's domain (fabric `10.77.0.0/24`,
//! not `lo`), so traffic between ranks in different namespaces crosses the veth pair,
//! and that it reaches exactly the ranks of its namespace through shared memory;
//! after the job the launcher checks that both veth ends sent packets.
//! A guard deletes both namespaces (which deletes the veth pair) when the test ends,
//! whether it passed or panicked, and the test then checks that they are gone. Before
//! making its pair, a test deletes `gexns<pid>_*` namespaces whose process no longer
//! exists (left by a run killed before its guard could run).
//!
//! Needs root (`CAP_SYS_ADMIN` and `CAP_NET_ADMIN`) and iproute2's `ip`. Without them
//! every test fails with a message saying so, unless `GEX_SKIP_NETNS=1` is set: the
//! tests then pass after printing why they did not run.
//!
//! Exclusions: none.

use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

mod hybrid_common;

use gex_core::boot::Bootstrap;
use gex_core::layer::LayerSet;
use gex_core::{Client, ClientBuilder, Config};
use gex_testkit::conformance::{self, Case, Job};
use gex_testkit::procs::{self, Procs};
use hybrid_common::OfiHybrid;

/// Subnet of the veth pair, as libfabric's tcp provider names the fabric.
const FABRIC: &str = "10.77.0.0/24";
const ADDR: [&str; 2] = ["10.77.0.1/24", "10.77.0.2/24"];

/// Longest one case may run on one rank.
const CASE_LIMIT: std::time::Duration = std::time::Duration::from_secs(120);

/// Runs `ip args…`, returning its stderr on failure.
fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("cannot run `ip {}`: {e}", args.join(" ")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "`ip {}` failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Why network namespaces cannot be made here, if they cannot.
fn unavailable() -> Option<String> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let euid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .unwrap_or("?");
    if euid != "0" {
        return Some(format!(
            "the network-namespace tests need root (effective uid is {euid})"
        ));
    }
    match Command::new("ip").arg("-V").output() {
        Ok(o) if o.status.success() => None,
        Ok(o) => Some(format!("`ip -V` failed ({})", o.status)),
        Err(e) => Some(format!(
            "the network-namespace tests need iproute2's `ip` command: {e}"
        )),
    }
}

/// Two network namespaces joined by a veth pair; dropping it deletes them.
struct NetnsPair {
    /// The namespaces made so far (deleted on drop).
    names: Vec<String>,
    /// The veth end in each namespace.
    veth: [String; 2],
}

impl NetnsPair {
    fn new() -> Result<NetnsPair, String> {
        NetnsPair::make(true)
    }

    /// Two namespaces; joined by the veth pair if `veth`, else with only `lo` up.
    fn make(veth_pair: bool) -> Result<NetnsPair, String> {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let tag = format!(
            "{}_{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        sweep_stale();
        let ns = [format!("gexns{tag}a"), format!("gexns{tag}b")];
        let veth = [format!("gxv{tag}a"), format!("gxv{tag}b")];
        let mut pair = NetnsPair {
            names: Vec::new(),
            veth: veth.clone(),
        };
        for n in &ns {
            ip(&["netns", "add", n])?;
            pair.names.push(n.clone());
        }
        if !veth_pair {
            for n in &ns {
                ip(&["-n", n, "link", "set", "lo", "up"])?;
            }
            return Ok(pair);
        }
        ip(&[
            "link", "add", &veth[0], "netns", &ns[0], "type", "veth", "peer", "name", &veth[1],
            "netns", &ns[1],
        ])?;
        for i in 0..2 {
            // No IPv6 link-local address: nothing but the job's IPv4 traffic (and its
            // ARP) crosses the pair, so its packet counters prove the job used it.
            ip(&["-n", &ns[i], "link", "set", &veth[i], "addrgenmode", "none"])?;
            ip(&["-n", &ns[i], "addr", "add", ADDR[i], "dev", &veth[i]])?;
            ip(&["-n", &ns[i], "link", "set", "lo", "up"])?;
            ip(&["-n", &ns[i], "link", "set", &veth[i], "up"])?;
        }
        // The kernel reports carrier (IFF_RUNNING) on the veth ends asynchronously (up
        // to a second later), and libfabric's tcp provider offers only running
        // interfaces: a rank started before would see only `lo`.
        for i in 0..2 {
            wait_running(&ns[i], &veth[i])?;
        }
        Ok(pair)
    }
}

/// Packets sent by `dev` in namespace `ns`.
fn tx_packets(ns: &str, dev: &str) -> Result<u64, String> {
    let out = Command::new("ip")
        .args(["-n", ns, "-j", "-s", "link", "show", "dev", dev])
        .output()
        .map_err(|e| format!("cannot run ip: {e}"))?;
    let json = String::from_utf8_lossy(&out.stdout);
    let tx = json
        .split_once("\"tx\":{")
        .and_then(|(_, t)| t.split_once("\"packets\":"))
        .map(|(_, t)| {
            t.chars()
                .take_while(char::is_ascii_digit)
                .collect::<String>()
        })
        .and_then(|n| n.parse().ok());
    tx.ok_or_else(|| format!("no tx packet count for {dev} in {ns}: {json}"))
}

/// Deletes `gexns<pid>_*` namespaces left by a test process that no longer exists
/// (one killed before its guard ran).
fn sweep_stale() {
    let Ok(dir) = std::fs::read_dir("/run/netns") else {
        return;
    };
    for e in dir.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix("gexns")
            .and_then(|r| r.split_once('_'))
            .and_then(|(p, _)| p.parse::<u32>().ok())
        else {
            continue;
        };
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            eprintln!("netns test: deleting {name}, left by process {pid} which is gone");
            let _ = ip(&["netns", "del", &name]);
        }
    }
}

/// Waits until `dev` in namespace `ns` has carrier (`LOWER_UP`, operstate `UP`).
fn wait_running(ns: &str, dev: &str) -> Result<(), String> {
    let t0 = std::time::Instant::now();
    loop {
        let out = Command::new("ip")
            .args(["-n", ns, "-o", "link", "show", "dev", dev])
            .output()
            .map_err(|e| format!("cannot run ip: {e}"))?;
        let line = String::from_utf8_lossy(&out.stdout);
        if line.contains("LOWER_UP") && line.contains("state UP") {
            return Ok(());
        }
        if t0.elapsed() > std::time::Duration::from_secs(10) {
            return Err(format!("{dev} in {ns} is not running after 10 s: {line}"));
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

impl Drop for NetnsPair {
    fn drop(&mut self) {
        for n in &self.names {
            if let Err(e) = ip(&["netns", "del", n]) {
                eprintln!("netns test: cleanup: {e}");
            }
        }
    }
}

/// Whether a named network namespace exists.
fn netns_exists(name: &str) -> bool {
    std::path::Path::new("/run/netns").join(name).exists()
}

/// `fn $core(job, case)` and `fn $rma(job, case)` (runners of `suite_modules!`): a job
/// running `case`, started as `$how` says, each rank's client built for the core suite
/// (`conformance::builder`, 256 KiB segments) or for the RMA suite
/// (`gex_testkit::rma::client_builder`, 2 MiB segments).
macro_rules! case_runners {
    (@one $name:ident, $how:expr, $builder:path, $segment:expr) => {
        fn $name(job: &Job<'_>, case: &Case<OfiHybrid>) -> Result<(), String> {
            launch(
                $how,
                job,
                $builder,
                |client| conformance::run_on_rank(client, case),
                $segment,
            )
        }
    };
    ($how:expr => $core:ident, $rma:ident) => {
        case_runners!(@one $core, $how, conformance::builder, 256 << 10);
        case_runners!(@one $rma, $how, gex_testkit::rma::client_builder, 2 << 20);
    };
}

case_runners!(How::Fork => runner, rma_runner);

/// One namespace job at a time in this test process. Each job is 4 rank processes on
/// the 2 cores of the CI machine; with the test harness's 2 threads, 8 ranks (and two
/// namespace pairs) would share them (docs/testing.md).
static JOBS: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Holds [`JOBS`] for one job (a job that failed and poisoned it still frees it).
fn one_job_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    JOBS.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// `None` if namespaces can be made here; otherwise `Some(result)` for a test that
/// cannot run: a pass (printing why) with `GEX_SKIP_NETNS=1`, else a failure.
fn skip(what: &str) -> Option<Result<(), String>> {
    let why = unavailable()?;
    if std::env::var("GEX_SKIP_NETNS").is_ok_and(|v| v == "1") {
        eprintln!("netns test {what} NOT RUN (GEX_SKIP_NETNS=1): {why}");
        return Some(Ok(()));
    }
    Some(Err(format!(
        "{why}; set GEX_SKIP_NETNS=1 to skip the network-namespace tests"
    )))
}

/// After a namespace job: reads what the veth ends sent, removes the namespaces
/// (`pair`) and runs `clean_up`; then no namespace may be left, the job (`report`)
/// must have passed, and both veth ends must have carried traffic. The packets each
/// sent.
fn after_job(
    pair: NetnsPair,
    report: procs::Report,
    clean_up: impl FnOnce(),
) -> Result<(u64, u64), String> {
    let names = pair.names.clone();
    let tx = [
        tx_packets(&names[0], &pair.veth[0]),
        tx_packets(&names[1], &pair.veth[1]),
    ];
    drop(pair);
    clean_up();
    for n in &names {
        if netns_exists(n) {
            return Err(format!("network namespace {n} is left after the test"));
        }
    }
    report.result()?;
    let [ta, tb] = tx;
    let (ta, tb) = (ta?, tb?);
    if ta == 0 || tb == 0 {
        return Err(format!(
            "the job passed but the veth pair carried no traffic ({ta} and {tb} packets sent)"
        ));
    }
    Ok((ta, tb))
}

/// How a namespace job is started.
#[derive(Clone, Copy)]
enum How {
    /// By gex-testkit's fork launcher, each rank through `ip netns exec`
    /// ([`fork_job`]).
    Fork,
    /// By Hydra's `mpiexec` ([`hydra_job`]).
    Hydra,
}

/// Runs `body` on every rank of a job of `job.ranks` ranks, half in each of two
/// namespaces joined by a veth pair, started as `how` says, after the checks of
/// [`rank`]; the clients come from `builder` (the layers the body needs).
fn launch<L: LayerSet>(
    how: How,
    job: &Job<'_>,
    builder: fn() -> ClientBuilder<L>,
    body: impl FnOnce(&Client<OfiHybrid>) -> Result<(), String>,
    segment: usize,
) -> Result<(), String> {
    let rank_body = |boot| rank(boot, job, builder, body, segment);
    if procs::is_rank() {
        // A rank: no namespaces to make; `run` runs the body and ends the process.
        return Procs::new(job.ranks).run(rank_body).result();
    }
    if let Some(r) = skip(job.case) {
        return r;
    }
    let _turn = one_job_at_a_time();
    match how {
        How::Fork => fork_job(job, rank_body),
        How::Hydra => hydra_job(job, rank_body),
    }
}

/// The test process's part of a [`How::Fork`] job whose ranks run `rank_body`.
fn fork_job<B, O>(job: &Job<'_>, rank_body: B) -> Result<(), String>
where
    B: FnOnce(Box<dyn gex_core::boot::Bootstrap>) -> O,
    O: procs::RankResult,
{
    let pair = NetnsPair::new()?;
    let names = pair.names.clone();
    let (a, b) = (names[0].as_str(), names[1].as_str());
    let hosts = host_ids(job.ranks).map(|h| if h == 0 { a } else { b });
    let report = Procs::new(job.ranks)
        .test(job.test_path)
        .timeout(CASE_LIMIT)
        .hosts(hosts)
        .host_exec(["ip", "netns", "exec", "{host}"])
        .run(rank_body);
    let (ta, tb) = after_job(pair, report, || ())?;
    eprintln!(
        "netns test {}: the veth ends sent {ta} and {tb} packets",
        job.case
    );
    Ok(())
}

/// The test process's part of a [`How::Hydra`] job whose ranks run `rank_body`:
/// `mpiexec.hydra` runs inside the first namespace with the two veth addresses as its
/// hosts (`-hosts 10.77.0.1:2,10.77.0.2:2`), its control socket on the first veth end
/// (`-iface`), and the `rsh` launcher pointed (`-launcher-exec`) at a small script
/// that starts Hydra's proxy for the second address with `ip netns exec <second
/// namespace>`. The ranks bootstrap through PMI-1; their host layout comes from
/// Hydra's `PMI_process_mapping`.
fn hydra_job<B, O>(job: &Job<'_>, rank_body: B) -> Result<(), String>
where
    B: FnOnce(Box<dyn gex_core::boot::Bootstrap>) -> O,
    O: procs::RankResult,
{
    let Some(mpiexec) = procs::mpiexec(job.case)? else {
        eprintln!(
            "netns test {} NOT RUN ({}=1): no mpiexec.hydra",
            job.case,
            procs::ALLOW_NO_MPIEXEC
        );
        return Ok(());
    };
    let pair = NetnsPair::new()?;
    let names = pair.names.clone();
    let (a, b) = (names[0].as_str(), names[1].as_str());
    let ip_of = |i: usize| ADDR[i].split('/').next().expect("address");
    let dir = std::env::temp_dir().join(format!("gex-netns-mpiexec-{a}"));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let script = dir.join("launch.sh");
    // Hydra's rsh launcher runs `<exec> <host> <proxy command line>`.
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nh=\"$1\"; shift\ncase \"$h\" in\n  {}) ns={a};;\n  {}) ns={b};;\n  *) echo \"launch.sh: unknown host $h\" >&2; exit 1;;\nesac\nexec ip netns exec \"$ns\" sh -c \"$*\"\n",
            ip_of(0),
            ip_of(1)
        ),
    )
    .map_err(|e| e.to_string())?;
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755))
            .map_err(|e| e.to_string())?;
    }
    let half = job.ranks / 2;
    let hosts = format!("{}:{half},{}:{}", ip_of(0), ip_of(1), job.ranks - half);
    let t0 = std::time::Instant::now();
    let report = Procs::new(job.ranks)
        .test(job.test_path)
        .timeout(CASE_LIMIT)
        .mpiexec(mpiexec)
        .mpiexec_prefix(["ip", "netns", "exec", a])
        .mpiexec_args([
            "-launcher".as_ref(),
            "rsh".as_ref(),
            "-launcher-exec".as_ref(),
            script.as_os_str(),
            "-iface".as_ref(),
            pair.veth[0].as_ref(),
            "-hosts".as_ref(),
            hosts.as_ref(),
        ])
        .run(rank_body);
    let (ta, tb) = after_job(pair, report, || {
        let _ = std::fs::remove_dir_all(&dir);
    })?;
    eprintln!(
        "netns test {} under mpiexec: {:?}, the veth ends sent {ta} and {tb} packets",
        job.case,
        t0.elapsed()
    );
    Ok(())
}

/// The first half of the ranks on host 0, the others on host 1.
fn host_ids(ranks: u32) -> impl Iterator<Item = u32> {
    (0..ranks).map(move |r| u32::from(r >= ranks / 2))
}

/// One rank: build the client with `builder`, check the host layout, the domain and
/// the shared-memory peers, then run `body`.
fn rank<L: LayerSet>(
    boot: Box<dyn Bootstrap>,
    job: &Job<'_>,
    builder: fn() -> ClientBuilder<L>,
    body: impl FnOnce(&Client<OfiHybrid>) -> Result<(), String>,
    segment: usize,
) -> Result<(), String> {
    let me = boot.rank();
    let hosts = boot.host_ids().to_vec();
    // Spin-then-block, not the `auto` policy's spinning (2 ranks per "host" on a
    // 2-core machine): two of these 4-rank jobs run at once under the test harness,
    // and spinning ranks of one job took the cores from the other's (a case of 1.5 s
    // alone took 50-60 s so).
    let client = builder()
        .config(Config::from_pairs([
            ("GEX_OFI_PROVIDER", "tcp"),
            ("GEX_WAIT", "spin-then-block"),
        ]))
        .segment_size(segment)
        .endpoints(job.endpoints)
        .init::<OfiHybrid>(boot)
        .map_err(|e| e.to_string())?;
    let report = client.conduit().far().report().clone();
    let want: Vec<u32> = host_ids(job.ranks).collect();
    let near: Vec<u32> = (0..job.ranks)
        .filter(|&r| want[r as usize] == want[me as usize])
        .collect();
    let check = if hosts != want {
        Err(format!("rank {me}: host ids {hosts:?}, want {want:?}"))
    } else if report.domain() == "lo" || report.fabric() != FABRIC {
        Err(format!(
            "rank {me}: the conduit opened domain {} (fabric {}), want the veth on {FABRIC}",
            report.domain(),
            report.fabric()
        ))
    } else if client.conduit().shared_memory_peers() != near.as_slice() {
        Err(format!(
            "rank {me}: reaches {:?} through shared memory, want its namespace's ranks {near:?}",
            client.conduit().shared_memory_peers()
        ))
    } else {
        body(&client)
    };
    if let Err(e) = check {
        procs::failed(&e);
        client.abort(1, &e);
    }
    client.finalize().map_err(|e| e.to_string())
}

gex_testkit::suite_modules! {
    suite: core,
    conduit: OfiHybrid;

    /// 4 ranks, 2 per namespace, one endpoint each.
    two_hosts: runner, ranks 4;

    /// 4 ranks, 2 per namespace, two endpoints each (one libfabric domain per endpoint).
    two_hosts_two_eps: runner, ranks 4, endpoints 2;
}

gex_testkit::suite_modules! {
    suite: rma,
    conduit: OfiHybrid;

    /// The RMA suite, 4 ranks, 2 per namespace: direct copies within a namespace, native
    /// `FI_RMA` across the veth.
    rma_two_hosts: rma_runner, ranks 4;
}

/// Requests to the rank's own namespace go through the rings, the others through
/// libfabric over the veth; puts across are native, puts to a neighbour plain copies.
#[test]
fn paths_are_counted() {
    paths_job(How::Fork, "paths_are_counted", |me| {
        host_ids(4)
            .enumerate()
            .filter(|&(_, h)| h == u32::from(me >= 2))
            .map(|(r, _)| r as u32)
            .collect()
    });
}

/// The test `name`: a 4-rank job started as `how` says, whose ranks check
/// (`hybrid_common::check_paths`) which path their traffic to each peer took, the
/// ranks of rank `me`'s namespace being `near(me)`.
fn paths_job(how: How, name: &str, near: fn(u32) -> Vec<u32>) {
    let job = Job {
        case: name,
        test_path: name,
        ranks: 4,
        endpoints: 1,
    };
    let r = launch(
        how,
        &job,
        hybrid_common::builder,
        |client| hybrid_common::check_paths(client, true, &near(client.rank())),
        1 << 20,
    );
    if let Err(e) = r {
        panic!("{e}");
    }
}

/// Two namespaces with only `lo` (no veth): a 4-rank job across them cannot work, and
/// every rank must fail at initialisation with a message naming the provider and the
/// problem, so the job ends at once with a non-zero code instead of hanging in the
/// wire-up (which would give up only after a minute).
#[test]
fn loopback_only_is_a_clear_error() {
    const NAME: &str = "loopback_only_is_a_clear_error";
    // Every rank records why its client could not initialise, then exits 3.
    let rank_body = |boot: Box<dyn Bootstrap>| -> () {
        let r = ClientBuilder::new()
            .config(Config::from_pairs([("GEX_OFI_PROVIDER", "tcp")]))
            .segment_size(64 << 10)
            .init::<OfiHybrid>(boot);
        let msg = match r {
            Ok(_) => "initialised".to_string(),
            Err(e) => e.to_string(),
        };
        procs::note("init", &msg);
        std::process::exit(3);
    };
    if procs::is_rank() {
        Procs::new(4).run(rank_body);
        return;
    }
    if let Some(r) = skip(NAME) {
        return r.unwrap();
    }
    let pair = NetnsPair::make(false).expect("namespaces");
    let names = pair.names.clone();
    let hosts = host_ids(4).map(|h| names[h as usize].clone());
    let report = Procs::new(4)
        .hosts(hosts)
        .host_exec(["ip", "netns", "exec", "{host}"])
        .run(rank_body);
    drop(pair);
    for n in &names {
        assert!(
            !netns_exists(n),
            "network namespace {n} is left after the test"
        );
    }
    assert!(
        report.code().is_some_and(|c| c != 0),
        "the job succeeded\n{report}"
    );
    report.assert_clean();
    let took = report.took;
    let msgs = report.notes("init");
    eprintln!("{NAME}: job failed after {took:?}: {msgs:?}");
    assert!(took < std::time::Duration::from_secs(30), "took {took:?}");
    assert!(!msgs.is_empty(), "no rank reported");
    for m in &msgs {
        assert!(
            m.contains("tcp")
                && m.contains("only the loopback interface")
                && m.contains("spans 2 hosts"),
            "unclear message: {m}"
        );
    }
}

case_runners!(How::Hydra => mpiexec_runner, mpiexec_rma_runner);

gex_testkit::suite_modules! {
    suite: core,
    conduit: OfiHybrid;

    /// The core conformance suite under Hydra's `mpiexec`, 2 ranks per namespace.
    mpiexec_two_hosts: mpiexec_runner, ranks 4;
}

gex_testkit::suite_modules! {
    suite: rma,
    conduit: OfiHybrid;

    /// The RMA suite under Hydra's `mpiexec`, 2 ranks per namespace.
    mpiexec_rma_two_hosts: mpiexec_rma_runner, ranks 4;
}

/// `paths_are_counted` under Hydra's `mpiexec`: the neighbourhood comes from
/// `PMI_process_mapping`.
#[test]
fn mpiexec_paths_are_counted() {
    paths_job(How::Hydra, "mpiexec_paths_are_counted", |me| {
        (0..4).filter(|&r| (r >= 2) == (me >= 2)).collect()
    });
}
