//! `gex-tune plots`: seed 003's findings on simulated 1024-rank machines, as SVG.
//!
//! Runs gex-coll's discrete-event LogGP simulator ([`gex_coll::des`]) over the
//! schedules gex-coll executes, with the Table 1 parameters of seed 003 (Cray XT4,
//! BlueGene/P, Ranger), and writes `exchange_<P>.svg` (flat against dissemination /
//! Bruck exchange) and `broadcast_<P>.svg` (signaling put against rendezvous
//! broadcast) into the output directory, printing the figures and crossovers.

use gex_coll::des::{Options, simulate};
use gex_coll::{Algorithm, LogGP, OpKind, PlanCtx, catalog};
use gex_tune::svg::{Chart, Series, page};
use std::sync::Arc;

/// Options of `plots`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct PlotArgs {
    /// Directory of the SVG files.
    #[arg(long, value_name = "DIR", default_value = "docs/plots")]
    pub(crate) out: String,
    /// Simulated ranks.
    #[arg(long = "sim-ranks", value_name = "P", default_value_t = 1024)]
    pub(crate) ranks: u32,
}

const PLATFORMS: [(&str, LogGP); 3] = [
    ("Cray XT4", LogGP::CRAY_XT4),
    ("BlueGene/P", LogGP::BLUEGENE_P),
    ("Ranger", LogGP::RANGER),
];

fn algo(name: &str) -> Result<Arc<dyn Algorithm>, String> {
    catalog()
        .into_iter()
        .find(|a| a.name() == name)
        .ok_or_else(|| format!("no algorithm {name}"))
}

fn time(a: &dyn Algorithm, op: OpKind, p: u32, n: usize, m: &LogGP) -> Result<f64, String> {
    let s: Vec<_> = (0..p)
        .map(|r| {
            a.plan(&PlanCtx {
                op,
                size: p,
                rank: r,
                root: 0,
                block: n,
                elem: 1,
                commutative: true,
            })
        })
        .collect();
    let o = Options {
        transport: a.transport(),
        in_my: true,
    };
    simulate(&s, m, o, None)
        .map(|x| x.time)
        .map_err(|e| format!("{} {op} P={p} n={n}: {e:?}", a.name()))
}

/// Simulates `names` on every platform; prints the first size at which `names[rival]`
/// beats `names[0]`.
fn charts(
    op: OpKind,
    p: u32,
    names: &[&str],
    rival: usize,
    sizes: &[usize],
) -> Result<Vec<Chart>, String> {
    let mut out = Vec::new();
    for (platform, m) in PLATFORMS {
        let mut series = Vec::new();
        for name in names {
            let a = algo(name)?;
            let mut points = Vec::new();
            for &n in sizes {
                let t = time(&*a, op, p, n, &m)?;
                println!("{platform:<11} {op} {name:<14} {n:>8} B {t:>12.1} us");
                points.push((n as f64, t));
            }
            series.push(Series {
                name: (*name).to_string(),
                points,
            });
        }
        match (0..sizes.len()).find(|&i| series[rival].points[i].1 < series[0].points[i].1) {
            Some(i) => println!(
                "{platform}: {} beats {} from {} B",
                names[rival], names[0], sizes[i]
            ),
            None => println!(
                "{platform}: {} beats {} at every size",
                names[0], names[rival]
            ),
        }
        out.push(Chart {
            title: format!(
                "{op}, {p} ranks, {platform} (L {} us, {:.2} GB/s)",
                m.l,
                1e-3 / m.big_g
            ),
            x_label: "bytes per block".into(),
            y_label: "simulated time (us)".into(),
            series,
        });
    }
    Ok(out)
}

pub(crate) fn run(a: &PlotArgs) -> Result<(), String> {
    let p = a.ranks.max(2);
    std::fs::create_dir_all(&a.out).map_err(|e| format!("{}: {e}", a.out))?;
    let ex = charts(
        OpKind::Exchange,
        p,
        &["bruck2", "bruck4", "flat"],
        2,
        &[8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192],
    )?;
    let path = format!("{}/exchange_{p}.svg", a.out);
    let title = format!(
        "Exchange on {p} simulated ranks (seed 003 Table 1): dissemination (Bruck) vs flat"
    );
    std::fs::write(&path, page(&title, &ex, 3)).map_err(|e| format!("{path}: {e}"))?;
    let bc = charts(
        OpKind::Broadcast,
        p,
        &[
            "binomial+put",
            "binomial+rdv",
            "binomial",
            "flat+put",
            "flat+rdv",
        ],
        1,
        &[8, 64, 512, 4096, 32768, 262144, 1 << 20],
    )?;
    let path2 = format!("{}/broadcast_{p}.svg", a.out);
    let title = format!("Broadcast on {p} simulated ranks: signaling put vs rendezvous vs eager");
    std::fs::write(&path2, page(&title, &bc, 3)).map_err(|e| format!("{path2}: {e}"))?;
    println!("wrote {path} and {path2}");
    Ok(())
}
