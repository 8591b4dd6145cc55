//! LogGP parameters: the machine model every cost model is written in.

use crate::error::CollError;

/// LogGP parameters (times in µs, `big_g` and `copy` in µs per byte).
///
/// `l` latency, `o` per-message CPU overhead, `g` gap between injections, `big_g` gap
/// per byte (1 / bandwidth); `copy` is the cost of copying one byte out of a
/// receive buffer (what a signaling put saves).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LogGP {
    /// Latency L.
    pub l: f64,
    /// Overhead o.
    pub o: f64,
    /// Gap g.
    pub g: f64,
    /// Gap per byte G.
    pub big_g: f64,
    /// Local copy cost per byte.
    pub copy: f64,
}

impl Default for LogGP {
    /// Parameters of shared memory on a current machine (used until a calibration
    /// or `GEX_COLL_LOGGP` says otherwise).
    fn default() -> Self {
        LogGP {
            l: 0.3,
            o: 0.1,
            g: 0.05,
            big_g: 1.0 / 10_000.0,
            copy: 1.0 / 20_000.0,
        }
    }
}

impl LogGP {
    /// Cray XT4 (Franklin) after seed 003's Table 1: 6.2 µs latency, 7.6 GB/s.
    pub const CRAY_XT4: LogGP = LogGP {
        l: 6.2,
        o: 0.5,
        g: 0.5,
        big_g: 1.0 / 7_600.0,
        copy: 1.0 / 10_600.0,
    };
    /// IBM BlueGene/P (Intrepid) after seed 003's Table 1: 1.5 µs, 0.85 GB/s.
    pub const BLUEGENE_P: LogGP = LogGP {
        l: 1.5,
        o: 0.5,
        g: 0.5,
        big_g: 1.0 / 850.0,
        copy: 1.0 / 13_600.0,
    };
    /// Sun Constellation (Ranger) after seed 003's Table 1: 2.3 µs, 1 GB/s.
    pub const RANGER: LogGP = LogGP {
        l: 2.3,
        o: 0.5,
        g: 0.5,
        big_g: 1.0 / 1_000.0,
        copy: 1.0 / 10_600.0,
    };

    /// Parses `L,o,g,G[,copy]` (µs, µs, µs, µs per byte, µs per byte), the format of
    /// `GEX_COLL_LOGGP`.
    ///
    /// ```
    /// let m = gex_coll::LogGP::parse("6.2,0.5,0.5,0.0001").unwrap();
    /// assert_eq!(m.l, 6.2);
    /// assert!(gex_coll::LogGP::parse("1,2").is_err());
    /// ```
    ///
    /// # Errors
    /// [`CollError::Config`] naming the problem.
    pub fn parse(s: &str) -> Result<LogGP, CollError> {
        let v: Result<Vec<f64>, _> = s.split(',').map(|x| x.trim().parse::<f64>()).collect();
        let v = v.map_err(|e| CollError::Config(format!("GEX_COLL_LOGGP={s:?}: {e}")))?;
        if !(4..=5).contains(&v.len()) || v.iter().any(|x| !x.is_finite() || *x < 0.0) {
            return Err(CollError::Config(format!(
                "GEX_COLL_LOGGP={s:?}: expected 4 or 5 non-negative numbers L,o,g,G[,copy]"
            )));
        }
        Ok(LogGP {
            l: v[0],
            o: v[1],
            g: v[2],
            big_g: v[3],
            copy: v.get(4).copied().unwrap_or(LogGP::default().copy),
        })
    }
}
