//! The hybrid mode: whether a job uses the near part at all, decided identically on
//! every rank from the job layout and one setting, `GEX_HYBRID` (`auto`, `1`, `0`).
//! Before the hybrid conduit was generic, the setting was the ofi conduit's
//! `GEX_OFI_HYBRID`; that name (in general `GEX_<FAR>_HYBRID`, after the far
//! conduit's name) is still read when `GEX_HYBRID` is unset. Pure logic: no I/O.

use gex_core::InitError;
use gex_core::config::Config;
use gex_core::spi::JobLayout;

/// The value of the setting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Setting {
    /// `auto` (default): hybrid when the job spans several hosts and some host has
    /// several ranks.
    Auto,
    /// `1`: hybrid whenever some host has several ranks (also a one-host job).
    On,
    /// `0`: never; every peer through the far conduit.
    Off,
}

/// The setting as read, and the variable it came from (for messages).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Read {
    pub(crate) setting: Setting,
    pub(crate) var: String,
}

/// The name of the setting.
pub(crate) const VAR: &str = "GEX_HYBRID";

/// The far conduit's own name for the setting, from before the hybrid conduit was
/// generic: `GEX_OFI_HYBRID` for the conduit named `ofi`.
pub(crate) fn legacy_var(far_name: &str) -> String {
    format!("GEX_{}_HYBRID", far_name.to_ascii_uppercase())
}

/// Reads the setting: `GEX_HYBRID`, else the far conduit's legacy name, else `auto`.
///
/// # Errors
/// [`InitError::Config`] naming the variable if its value is not `auto`, a boolean or
/// empty.
pub(crate) fn read(c: &Config, far_name: &str) -> Result<Read, InitError> {
    let legacy = legacy_var(far_name);
    let var = if c.get(VAR).is_some() {
        VAR.to_string()
    } else if c.get(&legacy).is_some() {
        legacy
    } else {
        return Ok(Read {
            setting: Setting::Auto,
            var: VAR.to_string(),
        });
    };
    let setting = match c.get(&var).map(str::trim) {
        None | Some("") | Some("auto") => Setting::Auto,
        Some(_) if c.bool(&var, false)? => Setting::On,
        Some(_) => Setting::Off,
    };
    Ok(Read { setting, var })
}

/// The shape of the job that the decision depends on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Shape {
    /// Distinct hosts.
    pub(crate) hosts: usize,
    /// Whether some host has several ranks.
    pub(crate) crowded: bool,
}

impl Shape {
    pub(crate) fn of(jl: &JobLayout) -> Shape {
        let mut h = jl.host.clone();
        h.sort_unstable();
        h.dedup();
        Shape {
            hosts: h.len(),
            crowded: (0..jl.size()).any(|r| jl.neighbours(r).len() > 1),
        }
    }
}

/// Whether the job is hybrid, and why (for the report).
pub(crate) fn decide(r: &Read, shape: Shape) -> (bool, String) {
    let var = &r.var;
    match (r.setting, shape.crowded) {
        (Setting::Off, _) => (false, format!("disabled by {var}=0")),
        (_, false) => (false, "every host has one rank".into()),
        (Setting::On, true) => (true, format!("{var}=1 and a host has several ranks")),
        (Setting::Auto, true) if shape.hosts > 1 => (
            true,
            format!("the job spans several hosts and a host has several ranks ({var}=auto)"),
        ),
        (Setting::Auto, true) => (
            false,
            format!(
                "one host ({var}=auto; a shared-memory conduit serves one-host jobs, {var}=1 forces the near part)"
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_pairs(pairs: &[(&str, &str)]) -> Result<Read, InitError> {
        read(&Config::from_pairs(pairs.iter().copied()), "ofi")
    }

    #[test]
    fn hybrid_follows_the_setting_and_the_layout() {
        let r = |setting| Read {
            setting,
            var: VAR.into(),
        };
        let shape = |hosts, crowded| Shape { hosts, crowded };
        // auto: several hosts and a host with several ranks.
        assert!(decide(&r(Setting::Auto), shape(2, true)).0);
        assert!(
            !decide(&r(Setting::Auto), shape(1, true)).0,
            "one host: the shared-memory conduit's job"
        );
        assert!(
            !decide(&r(Setting::Auto), shape(4, false)).0,
            "one rank per host: nothing to share"
        );
        // 1: whenever a host has several ranks.
        assert!(decide(&r(Setting::On), shape(1, true)).0);
        assert!(!decide(&r(Setting::On), shape(3, false)).0);
        // 0: never.
        let (on, why) = decide(&r(Setting::Off), shape(2, true));
        assert!(!on);
        assert_eq!(why, "disabled by GEX_HYBRID=0");
    }

    #[test]
    fn the_setting_and_its_legacy_name_are_read() {
        assert_eq!(read_pairs(&[]).unwrap().setting, Setting::Auto);
        assert_eq!(
            read_pairs(&[("GEX_HYBRID", "1")]).unwrap().setting,
            Setting::On
        );
        assert_eq!(
            read_pairs(&[("GEX_HYBRID", "auto")]).unwrap().setting,
            Setting::Auto
        );
        let legacy = read_pairs(&[("GEX_OFI_HYBRID", "0")]).unwrap();
        assert_eq!(legacy.setting, Setting::Off);
        assert_eq!(
            legacy.var, "GEX_OFI_HYBRID",
            "messages name the variable set"
        );
        // The new name wins.
        let both = read_pairs(&[("GEX_OFI_HYBRID", "0"), ("GEX_HYBRID", "1")]).unwrap();
        assert_eq!(
            (both.setting, both.var.as_str()),
            (Setting::On, "GEX_HYBRID")
        );
        let e = read_pairs(&[("GEX_OFI_HYBRID", "maybe")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("GEX_OFI_HYBRID"), "{e}");
    }

    #[test]
    fn shape_of_a_layout() {
        let jl = JobLayout {
            eps: vec![1; 4],
            max_eps: vec![1; 4],
            seg_len: vec![4096; 4],
            host: vec![0, 0, 1, 2],
            process: vec![1, 2, 3, 4],
        };
        assert_eq!(
            Shape::of(&jl),
            Shape {
                hosts: 3,
                crowded: true
            }
        );
        let jl = JobLayout {
            host: vec![0, 1, 2, 3],
            ..jl
        };
        assert!(!Shape::of(&jl).crowded);
    }
}
