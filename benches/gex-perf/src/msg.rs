//! Two-sided tagged messaging over gex-msg: the `msg` subcommand.
//!
//! The pair tests run between ranks 0 and 1 only, as the MPI anchor
//! (`../shared/anchors/mpibench.c`, its `pingpong` lines) does; every other rank waits
//! in the barrier that ends the phase.
//! - `msg_pingpong_lat` (µs, one-way = half the round trip): rank 0 `send`s `size`
//!   bytes to rank 1 and `recv`s them back; rank 1 `recv`s and `send`s (blocking
//!   calls, tag 1), as mpibench's `MPI_Send`/`MPI_Recv` pingpong.
//! - `msg_pingpong_bw` (MB/s = 1e6 B/s): `size` / one-way time of the same batches,
//!   as mpibench's `pingpong_bw`.
//! - `msg_bi_lat` (µs): seed 002's bidirectional latency (after OSU): both ranks post
//!   one `irecv` and one `isend` of `size` bytes to each other at once and wait for
//!   both; time per exchange.
//! - `msg_bibw` (MB/s): OSU `osu_bibw`: both ranks post a window of [`WINDOW`]
//!   `irecv`s and [`WINDOW`] `isend`s at once, then wait for all; bytes moved in both
//!   directions / time.
//! - `msg_bi_rate` (messages/s, 8 B): the same windowed exchange with 8-byte
//!   messages (`osu_mbw_mr` for one pair); messages in both directions / time.
//! - `msg_anysource_rate` (messages/s, 8 B, at least 3 ranks): every rank but 0 sends
//!   8-byte messages to rank 0, which receives them with any-source `recv`s;
//!   messages received / time (rank 0's clock).
//!
//! The driving rank (0) tells the others what to do with a command message (tag
//! [`TAG_CMD`]: operation, size, iterations) before each batch, so its timed batches
//! include one small message; a batch lasts ~50 ms (`--quick`: ~4 ms), which makes
//! that negligible. Each point: warm-up (which sizes the batches), then 7 (`--quick`:
//! 3) timed batches; value = median batch, min/max = extreme batches.

use crate::complain;
use crate::report::{Record, Reporter};
use crate::world_barrier as barrier;
use gex::core::{Client, Endpoint};
use gex::msg::{Comm, MsgExt};
use gex::spi::Conduit;
use gex::{ClientBuilder, DefaultLayers};
use std::time::Duration;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// Messages each rank has in flight per round of the windowed bidirectional tests
/// (osu_bibw's default window).
pub(crate) const WINDOW: usize = 64;
/// Tag of the driver's commands.
const TAG_CMD: u32 = 7;
/// Tag of measured messages.
const TAG_DATA: u32 = 1;
/// The context every message of the benchmark uses.
const W: Comm = Comm::WORLD;

/// Options of the `msg` benchmark.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct MsgArgs {
    /// Smoke run: sizes 8 B, 4 KiB and 64 KiB (one rendezvous size), short timings.
    #[arg(long)]
    pub(crate) quick: bool,
    /// Message sizes of the ping-pong and bidirectional tests, comma separated, K/M/G
    /// suffixes allowed (default 8,64,512,4K,32K,256K,1M).
    #[arg(long, value_name = "LIST", value_delimiter = ',', value_parser = crate::parse_size)]
    pub(crate) sizes: Vec<usize>,
}

/// A `msg` run.
pub(crate) type MsgJob = crate::Run<MsgArgs>;

impl MsgJob {
    /// The default layers (gex-perf builds the facade with `msg`: gex-msg is one).
    pub(crate) fn builder(&self) -> ClientBuilder<DefaultLayers> {
        gex::builder()
    }

    fn sizes(&self) -> Vec<usize> {
        let mut v = if !self.args.sizes.is_empty() {
            self.args.sizes.clone()
        } else if self.args.quick {
            vec![8, 4096, 65536]
        } else {
            vec![8, 64, 512, 4096, 32768, 262_144, 1 << 20]
        };
        v.sort_unstable();
        v.dedup();
        v
    }
}

rank_job!(MsgJob, run, "gex-perf msg");

/// What a command asks the served ranks to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    /// Leave the serving loop.
    Stop = 0,
    /// Echo `k` messages (ping-pong).
    PingPong = 1,
    /// `k` rounds of a window of `w` exchanges.
    Bi = 2,
    /// Send `k` messages to the driver.
    Flood = 3,
}

/// A command: operation, message size, iterations, window.
#[derive(Debug, Clone, Copy)]
struct Cmd {
    op: Op,
    size: usize,
    k: u64,
    window: usize,
}

impl Cmd {
    /// Ends the server's loop (`serve`).
    const STOP: Cmd = Cmd {
        op: Op::Stop,
        size: 0,
        k: 0,
        window: 0,
    };

    fn encode(self) -> [u8; 32] {
        let mut b = [0u8; 32];
        b[..8].copy_from_slice(&(self.op as u64).to_le_bytes());
        b[8..16].copy_from_slice(&(self.size as u64).to_le_bytes());
        b[16..24].copy_from_slice(&self.k.to_le_bytes());
        b[24..].copy_from_slice(&(self.window as u64).to_le_bytes());
        b
    }

    fn decode(b: &[u8]) -> Res<Cmd> {
        if b.len() != 32 {
            return Err(format!("a command of {} bytes", b.len()).into());
        }
        let w = |i: usize| {
            let mut x = [0u8; 8];
            x.copy_from_slice(&b[i * 8..i * 8 + 8]);
            u64::from_le_bytes(x)
        };
        let op = match w(0) {
            0 => Op::Stop,
            1 => Op::PingPong,
            2 => Op::Bi,
            3 => Op::Flood,
            x => return Err(format!("unknown command {x}").into()),
        };
        Ok(Cmd {
            op,
            size: w(1) as usize,
            k: w(2),
            window: w(3) as usize,
        })
    }
}

/// Buffers of one rank: a send buffer and the receive buffers of a window.
struct Bufs {
    src: Vec<u8>,
    /// Receive buffers for `irecv` (given back by their events, reused).
    pool: Vec<Vec<u8>>,
    /// The buffer of blocking `recv`s.
    rbuf: Vec<u8>,
}

impl Bufs {
    fn new(most: usize) -> Bufs {
        Bufs {
            src: vec![0x5a; most],
            pool: Vec::new(),
            rbuf: vec![0; most],
        }
    }
}

/// `k` blocking round trips of `size` bytes with `peer` (the driver's side).
fn pingpong<C: Conduit>(
    ep: &mut Endpoint<C>,
    b: &mut Bufs,
    peer: u32,
    size: usize,
    k: u64,
) -> Res<()> {
    for _ in 0..k {
        ep.send(W, peer, TAG_DATA, &b.src[..size])?;
        let st = ep.recv(W, Some(peer), Some(TAG_DATA), &mut b.rbuf[..size])?;
        if st.len != size {
            return Err(format!("pingpong: {} bytes came back, {size} sent", st.len).into());
        }
    }
    Ok(())
}

/// `k` echoes of `size` bytes to `peer` (the served side of [`pingpong`]).
fn echo<C: Conduit>(ep: &mut Endpoint<C>, b: &mut Bufs, peer: u32, size: usize, k: u64) -> Res<()> {
    for _ in 0..k {
        let st = ep.recv(W, Some(peer), Some(TAG_DATA), &mut b.rbuf[..size])?;
        ep.send(W, peer, TAG_DATA, &b.src[..st.len])?;
    }
    Ok(())
}

/// `k` rounds of `window` simultaneous exchanges of `size` bytes with `peer`: post
/// the receives, post the sends, wait for all (both sides run the same).
fn bidir<C: Conduit>(
    ep: &mut Endpoint<C>,
    b: &mut Bufs,
    peer: u32,
    size: usize,
    window: usize,
    k: u64,
) -> Res<()> {
    b.pool.resize_with(window, Vec::new);
    let mut recvs = Vec::with_capacity(window);
    let mut sends = Vec::with_capacity(window);
    for _ in 0..k {
        for mut buf in b.pool.drain(..) {
            buf.resize(size, 0);
            recvs.push(ep.irecv(W, Some(peer), Some(TAG_DATA), buf)?);
        }
        for _ in 0..window {
            sends.push(ep.isend(W, peer, TAG_DATA, &b.src[..size])?);
        }
        for ev in sends.drain(..) {
            ep.wait(ev)?;
        }
        for ev in recvs.drain(..) {
            let got = ep.wait(ev)?;
            if got.data.len() != size {
                return Err(
                    format!("bidirectional: got {} bytes, {size} sent", got.data.len()).into(),
                );
            }
            b.pool.push(got.data);
        }
    }
    Ok(())
}

/// Serves the commands of `driver` until it says stop.
fn serve<C: Conduit>(ep: &mut Endpoint<C>, b: &mut Bufs, driver: u32) -> Res<()> {
    let mut cmd = [0u8; 32];
    loop {
        let st = ep.recv(W, Some(driver), Some(TAG_CMD), &mut cmd)?;
        let c = Cmd::decode(&cmd[..st.len])?;
        match c.op {
            Op::Stop => return Ok(()),
            Op::PingPong => echo(ep, b, driver, c.size, c.k)?,
            Op::Bi => bidir(ep, b, driver, c.size, c.window, c.k)?,
            Op::Flood => {
                for _ in 0..c.k {
                    ep.send(W, driver, TAG_DATA, &b.src[..c.size])?;
                }
            }
        }
    }
}

fn command<C: Conduit>(ep: &mut Endpoint<C>, to: u32, c: Cmd) -> Res<()> {
    ep.send(W, to, TAG_CMD, &c.encode())?;
    Ok(())
}

/// Rank 0's side of the any-source phase: every other rank sends 8-byte messages,
/// which rank 0 receives from any source; its times per batch (then it stops the
/// senders).
fn anysource<C: Conduit>(
    ep: &mut Endpoint<C>,
    b: &mut Bufs,
    batch: Duration,
    count: u32,
) -> Res<Vec<f64>> {
    let n = ep.size();
    let senders = u64::from(n - 1);
    let v = crate::rma::batches(batch, count, |k| {
        for r in 1..n {
            command(
                ep,
                r,
                Cmd {
                    op: Op::Flood,
                    size: 8,
                    k,
                    window: 1,
                },
            )?;
        }
        for _ in 0..k * senders {
            let st = ep.recv(W, None, Some(TAG_DATA), &mut b.rbuf[..8])?;
            if st.len != 8 {
                return Err(format!("anysource: {} bytes from {}", st.len, st.source).into());
            }
        }
        Ok(())
    })?;
    for r in 1..n {
        command(ep, r, Cmd::STOP)?;
    }
    Ok(v)
}

fn run<C: Conduit>(job: &MsgJob, client: &Client<C>) -> Res<()> {
    let (me, n) = (client.rank(), client.size());
    let (mut ep, _) = crate::rank_endpoint(client, job.pin)?;
    let sizes = job.sizes();
    let most = sizes.iter().copied().max().unwrap_or(8).max(8);
    let mut b = Bufs::new(most);
    let (batch, count) = crate::rma::timing(job.args.quick, Duration::from_millis(50));
    let reporter = Reporter::new(job.json);
    if me == 0 {
        let mut lines = vec![
            format!(
                "gex-perf msg: {n} ranks as {}, conduit {}, wait policy {:?}; pair tests between ranks 0 and 1 (the others wait in a barrier)",
                crate::rank_kind(),
                client.conduit_name(),
                ep.wait_policy()
            ),
            format!(
                "value: median of {count} batches, min/max: extreme batches; us one-way (pingpong) or per exchange (bi_lat), MB/s = 1e6 B/s, msg/s; window {WINDOW}"
            ),
        ];
        if n < 3 {
            lines.push("msg_anysource_rate skipped: needs at least 3 ranks".into());
        }
        reporter.header(&lines);
        if n < 3 && job.json {
            complain("msg_anysource_rate skipped: needs at least 3 ranks");
        }
    }
    let report = |name: &'static str, size: usize, unit: &'static str, mut v: Vec<f64>| {
        reporter.record(&Record::of_samples(client, name, size, unit, &mut v));
    };
    if n < 2 {
        return Err("msg needs at least 2 ranks".into());
    }

    // Phase 1: the pair (0, 1); the other ranks wait in the barrier below.
    barrier(&mut ep)?;
    if me == 0 {
        for &s in &sizes {
            let cmd = Cmd {
                op: Op::PingPong,
                size: s,
                k: 0,
                window: 1,
            };
            let v = crate::rma::batches(batch, count, |k| {
                command(&mut ep, 1, Cmd { k, ..cmd })?;
                pingpong(&mut ep, &mut b, 1, s, k)
            })?;
            // One-way = half the round trip.
            let one_way: Vec<f64> = v.iter().map(|t| t / 2.0).collect();
            report(
                "msg_pingpong_lat",
                s,
                "us",
                one_way.iter().map(|t| t * 1e6).collect(),
            );
            report(
                "msg_pingpong_bw",
                s,
                "MB/s",
                one_way.iter().map(|t| s as f64 / t / 1e6).collect(),
            );
        }
        for (window, name) in [(1, "msg_bi_lat"), (WINDOW, "msg_bibw")] {
            for &s in &sizes {
                let cmd = Cmd {
                    op: Op::Bi,
                    size: s,
                    k: 0,
                    window,
                };
                let v = crate::rma::batches(batch, count, |k| {
                    command(&mut ep, 1, Cmd { k, ..cmd })?;
                    bidir(&mut ep, &mut b, 1, s, window, k)
                })?;
                if window == 1 {
                    report(name, s, "us", v.iter().map(|t| t * 1e6).collect());
                } else {
                    let bytes = (2 * window * s) as f64;
                    report(name, s, "MB/s", v.iter().map(|t| bytes / t / 1e6).collect());
                }
            }
        }
        let cmd = Cmd {
            op: Op::Bi,
            size: 8,
            k: 0,
            window: WINDOW,
        };
        let v = crate::rma::batches(batch, count, |k| {
            command(&mut ep, 1, Cmd { k, ..cmd })?;
            bidir(&mut ep, &mut b, 1, 8, WINDOW, k)
        })?;
        let msgs = (2 * WINDOW) as f64;
        report(
            "msg_bi_rate",
            8,
            "msg/s",
            v.iter().map(|t| msgs / t).collect(),
        );
        command(&mut ep, 1, Cmd::STOP)?;
    } else if me == 1 {
        serve(&mut ep, &mut b, 0)?;
    }
    barrier(&mut ep)?;

    // Phase 2: every other rank sends 8 B to rank 0, which receives from any source.
    if n >= 3 {
        if me == 0 {
            let v = anysource(&mut ep, &mut b, batch, count)?;
            let per_batch = f64::from(n - 1);
            report(
                "msg_anysource_rate",
                8,
                "msg/s",
                v.iter().map(|t| per_batch / t).collect(),
            );
        } else {
            serve(&mut ep, &mut b, 0)?;
        }
        barrier(&mut ep)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_round_trip() {
        let c = Cmd {
            op: Op::Bi,
            size: 1 << 20,
            k: 12345,
            window: WINDOW,
        };
        let d = Cmd::decode(&c.encode()).unwrap();
        assert_eq!((d.op, d.size, d.k, d.window), (c.op, c.size, c.k, c.window));
        assert!(Cmd::decode(&[0u8; 8]).is_err());
        let mut bad = [0u8; 32];
        bad[0] = 9;
        assert!(Cmd::decode(&bad).is_err());
    }
}
