//! Hand-written SVG line charts: log-scale axes, one polyline per series, a legend.
//! [`page`] lays several charts out in a grid in one SVG document.

use std::fmt::Write as _;

/// One line of a chart.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    /// Legend label.
    pub name: String,
    /// Points (x, y); non-positive values are skipped on log axes.
    pub points: Vec<(f64, f64)>,
}

/// One chart.
#[derive(Clone, Debug, PartialEq)]
pub struct Chart {
    /// Title above the plot.
    pub title: String,
    /// Label of the x axis.
    pub x_label: String,
    /// Label of the y axis.
    pub y_label: String,
    /// The lines.
    pub series: Vec<Series>,
}

const W: f64 = 520.0;
const H: f64 = 340.0;
const COLORS: [&str; 10] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#17becf",
];

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn fmt_tick(v: f64) -> String {
    if v >= 1024.0 * 1024.0 && (v / 1048576.0).fract() == 0.0 {
        format!("{}M", v / 1048576.0)
    } else if v >= 1024.0 && (v / 1024.0).fract() == 0.0 {
        format!("{}K", v / 1024.0)
    } else if v >= 1.0 {
        format!("{v}")
    } else {
        format!("{v:.2}")
    }
}

impl Chart {
    /// The chart as an SVG group at (`dx`, `dy`), `W`×`H` pixels: x on a log2 axis,
    /// y on a log10 axis.
    fn group(&self, dx: f64, dy: f64) -> String {
        let mut o = String::new();
        let pts: Vec<(f64, f64)> = self
            .series
            .iter()
            .flat_map(|s| s.points.iter().copied())
            .filter(|p| p.0 > 0.0 && p.1 > 0.0 && p.0.is_finite() && p.1.is_finite())
            .collect();
        let (x0, x1, y0, y1) = if pts.is_empty() {
            (1.0, 2.0, 1.0, 10.0)
        } else {
            let f = |a: f64, b: f64| (a.min(b), a.max(b));
            let (xlo, xhi) = pts
                .iter()
                .fold((f64::MAX, f64::MIN), |(a, b), p| (f(a, p.0).0, f(b, p.0).1));
            let (ylo, yhi) = pts
                .iter()
                .fold((f64::MAX, f64::MIN), |(a, b), p| (f(a, p.1).0, f(b, p.1).1));
            (
                xlo.log2().floor(),
                xhi.log2().ceil().max(xlo.log2().floor() + 1.0),
                ylo.log10().floor(),
                yhi.log10().ceil().max(ylo.log10().floor() + 1.0),
            )
        };
        let (l, r, t, b) = (60.0, 130.0, 30.0, 45.0);
        let px = |x: f64| dx + l + (x.log2() - x0) / (x1 - x0) * (W - l - r);
        let py = |y: f64| dy + H - b - (y.log10() - y0) / (y1 - y0) * (H - t - b);
        let _ = writeln!(
            o,
            r#"<text x="{:.1}" y="{:.1}" font-size="14" text-anchor="middle">{}</text>"#,
            dx + l + (W - l - r) / 2.0,
            dy + 18.0,
            esc(&self.title)
        );
        let _ = writeln!(
            o,
            r##"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="none" stroke="#444"/>"##,
            dx + l,
            dy + t,
            W - l - r,
            H - t - b
        );
        // x ticks: every power of two (every other one when crowded).
        let step = if x1 - x0 > 12.0 { 2.0 } else { 1.0 };
        let mut e = x0;
        while e <= x1 {
            let x = px(e.exp2());
            let _ = writeln!(
                o,
                r##"<line x1="{x:.1}" y1="{:.1}" x2="{x:.1}" y2="{:.1}" stroke="#ddd"/><text x="{x:.1}" y="{:.1}" font-size="10" text-anchor="middle">{}</text>"##,
                dy + t,
                dy + H - b,
                dy + H - b + 13.0,
                fmt_tick(e.exp2())
            );
            e += step;
        }
        let mut e = y0;
        while e <= y1 {
            let y = py(10f64.powf(e));
            let _ = writeln!(
                o,
                r##"<line x1="{:.1}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" font-size="10" text-anchor="end">{}</text>"##,
                dx + l,
                dx + W - r,
                dx + l - 4.0,
                y + 3.0,
                fmt_tick(10f64.powf(e))
            );
            e += 1.0;
        }
        let _ = writeln!(
            o,
            r#"<text x="{:.1}" y="{:.1}" font-size="11" text-anchor="middle">{}</text>"#,
            dx + l + (W - l - r) / 2.0,
            dy + H - 12.0,
            esc(&self.x_label)
        );
        let _ = writeln!(
            o,
            r#"<text x="{:.1}" y="{:.1}" font-size="11" text-anchor="middle" transform="rotate(-90 {:.1} {:.1})">{}</text>"#,
            dx + 16.0,
            dy + t + (H - t - b) / 2.0,
            dx + 16.0,
            dy + t + (H - t - b) / 2.0,
            esc(&self.y_label)
        );
        for (i, s) in self.series.iter().enumerate() {
            let c = COLORS[i % COLORS.len()];
            let dash = if i >= COLORS.len() {
                r#" stroke-dasharray="5,3""#
            } else {
                ""
            };
            let p: Vec<String> = s
                .points
                .iter()
                .filter(|p| p.0 > 0.0 && p.1 > 0.0 && p.0.is_finite() && p.1.is_finite())
                .map(|&(x, y)| format!("{:.1},{:.1}", px(x), py(y)))
                .collect();
            let _ = writeln!(
                o,
                r#"<polyline fill="none" stroke="{c}" stroke-width="1.8"{dash} points="{}"/>"#,
                p.join(" ")
            );
            for q in &p {
                let (x, y) = q.split_once(',').expect("formatted above");
                let _ = writeln!(o, r#"<circle cx="{x}" cy="{y}" r="2.2" fill="{c}"/>"#);
            }
            let ly = dy + t + 8.0 + 15.0 * i as f64;
            let _ = writeln!(
                o,
                r#"<line x1="{:.1}" y1="{ly:.1}" x2="{:.1}" y2="{ly:.1}" stroke="{c}" stroke-width="2"{dash}/><text x="{:.1}" y="{:.1}" font-size="10">{}</text>"#,
                dx + W - r + 6.0,
                dx + W - r + 24.0,
                dx + W - r + 28.0,
                ly + 3.5,
                esc(&s.name)
            );
        }
        o
    }
}

/// An SVG document with `charts` in a grid of `cols` columns under `title`.
pub fn page(title: &str, charts: &[Chart], cols: usize) -> String {
    let cols = cols.max(1).min(charts.len().max(1));
    let rows = charts.len().div_ceil(cols).max(1);
    let (w, h) = (W * cols as f64, H * rows as f64 + 30.0);
    let mut o = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w:.0}" height="{h:.0}" viewBox="0 0 {w:.0} {h:.0}" font-family="sans-serif">
<rect width="100%" height="100%" fill="white"/>
<text x="{:.1}" y="20" font-size="16" text-anchor="middle">{}</text>
"#,
        w / 2.0,
        esc(title)
    );
    for (i, c) in charts.iter().enumerate() {
        o.push_str(&c.group(W * (i % cols) as f64, 30.0 + H * (i / cols) as f64));
    }
    o.push_str("</svg>\n");
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_has_every_series_and_is_well_formed() {
        let c = Chart {
            title: "exchange <P=1024>".into(),
            x_label: "bytes".into(),
            y_label: "us".into(),
            series: vec![
                Series {
                    name: "flat".into(),
                    points: vec![(8.0, 100.0), (64.0, 120.0), (4096.0, 900.0)],
                },
                Series {
                    name: "bruck2".into(),
                    points: vec![(8.0, 20.0), (64.0, 0.0), (4096.0, 2000.0)],
                },
            ],
        };
        let s = page("t", &[c.clone(), c], 2);
        assert!(s.starts_with("<svg") && s.trim_end().ends_with("</svg>"));
        assert_eq!(s.matches("<polyline").count(), 4);
        // The zero point is skipped on the log axis: 3 + 2 markers per chart.
        assert_eq!(s.matches("<circle").count(), 10);
        assert!(s.contains("&lt;P=1024&gt;") && !s.contains("<P=1024>"));
        assert!(s.contains(">4K<"));
    }
}
