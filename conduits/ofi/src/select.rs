//! Provider selection: `fi_getinfo` with the capabilities gex wants, dropping the
//! optional ones a provider lacks (native RMA and atomics, multi-receive, send-after-send
//! ordering) instead of failing; the choice of domain (loopback for one-host jobs, a
//! real interface across hosts); and whether implicit-event puts may be relaxed.
//! Every choice keeps its reason for the report ([`crate::OfiReport`]).

use crate::config::{Settings, conduit_err};
use crate::fabric::{Attrs, Errno, Hints, Info, InfoList, InfoRef, flags};
use gex_core::InitError;

/// Whether `provider` (`tcp`, `tcp;ofi_rxm`) carries the operations between two
/// endpoints in one byte stream that the target processes in order, placing a write's
/// bytes before it reads the next request: for it, message ordering `FI_ORDER_RMA_RAW`
/// implies that a read sees the bytes of every earlier write, although it reports
/// `max_order_raw_size` 0 once `FI_ATOMIC` is asked for (`ofi_rxm` carries atomics as
/// messages, outside that data ordering). See docs/ofi.md, "Relaxed puts".
pub(crate) fn stream_provider(provider: &str) -> bool {
    provider.split(';').next() == Some("tcp")
}

/// Relaxed puts (transmit-complete writes whose arrival an ordered read proves): the
/// largest write that may be relaxed, or why none may.
pub(crate) fn relaxed_limit(rma: bool, enabled: bool, a: &Attrs) -> Result<usize, String> {
    if !rma {
        Err("no native RMA".into())
    } else if !enabled {
        Err("disabled by GEX_OFI_RELAXED_PUTS=0".into())
    } else if a.max_order_raw > 0 {
        Ok(a.max_order_raw)
    } else if a.rma_raw && stream_provider(&a.provider) {
        Ok(usize::MAX)
    } else {
        Err("provider does not order reads after writes (FI_ORDER_RAW / FI_ORDER_RMA_RAW, with max_order_raw_size > 0 unless the provider is tcp)".into())
    }
}

/// The offer chosen, what it lacks, and why.
pub(crate) struct Chosen {
    pub(crate) info: Info,
    pub(crate) attrs: Attrs,
    pub(crate) multi_recv: Result<(), String>,
    pub(crate) rma: Result<(), String>,
    pub(crate) atomics: Result<(), String>,
    pub(crate) ordered: bool,
}

/// The `FI_MR_*` names of the modes set in `m`.
pub(crate) fn mr_mode_names(m: i32) -> Vec<&'static str> {
    [
        (flags::MR_LOCAL, "FI_MR_LOCAL"),
        (flags::MR_VIRT_ADDR, "FI_MR_VIRT_ADDR"),
        (flags::MR_ALLOCATED, "FI_MR_ALLOCATED"),
        (flags::MR_PROV_KEY, "FI_MR_PROV_KEY"),
        (flags::MR_ENDPOINT, "FI_MR_ENDPOINT"),
    ]
    .into_iter()
    .filter(|(f, _)| m & f != 0)
    .map(|(_, n)| n)
    .collect()
}

/// The optional capabilities still asked for, and why each dropped one is missing.
struct Wants {
    rma: bool,
    atomic: bool,
    multi: bool,
    order: bool,
    notes_rma: String,
    notes_atomic: String,
    notes_multi: String,
}

impl Wants {
    fn new(s: &Settings) -> Wants {
        let note = |on: bool, var: &str| {
            if on {
                String::new()
            } else {
                format!("disabled by {var}=0")
            }
        };
        Wants {
            rma: s.rma,
            atomic: s.rma && s.atomics,
            multi: s.multi_recv,
            order: true,
            notes_rma: note(s.rma, "GEX_OFI_RMA"),
            notes_atomic: if !s.rma {
                note(false, "GEX_OFI_RMA")
            } else {
                note(s.atomics, "GEX_OFI_ATOMICS")
            },
            notes_multi: note(s.multi_recv, "GEX_OFI_MULTI_RECV"),
        }
    }

    /// The `fi_getinfo` hints for what is still wanted.
    fn hints(&self, provider: &Option<String>) -> Hints {
        let rma_caps =
            flags::RMA | flags::READ | flags::WRITE | flags::REMOTE_READ | flags::REMOTE_WRITE;
        Hints {
            provider: provider.clone(),
            caps: flags::MSG
                | if self.rma { rma_caps } else { 0 }
                | if self.atomic { flags::ATOMIC } else { 0 }
                | if self.multi { flags::MULTI_RECV } else { 0 },
            mr_mode: flags::MR_LOCAL
                | flags::MR_VIRT_ADDR
                | flags::MR_ALLOCATED
                | flags::MR_PROV_KEY
                | flags::MR_ENDPOINT,
            mode: flags::CONTEXT | flags::CONTEXT2,
            msg_order: if self.order { flags::ORDER_SAS } else { 0 },
        }
    }

    /// Drops the next optional capability after `fi_getinfo` found no offer with all of
    /// them (atomics, then RMA, then multi-receive, then ordering); false when nothing
    /// optional is left.
    fn drop_one(&mut self) -> bool {
        if self.atomic {
            self.atomic = false;
            self.notes_atomic = "provider does not offer FI_ATOMIC with FI_MSG and FI_RMA".into();
        } else if self.rma {
            self.rma = false;
            self.notes_rma = "provider does not offer FI_RMA with FI_MSG".into();
        } else if self.multi {
            self.multi = false;
            self.notes_multi = "provider does not offer FI_MULTI_RECV".into();
        } else if self.order {
            self.order = false;
        } else {
            return false;
        }
        true
    }

    fn chosen(self, pick: &InfoRef<'_>) -> Chosen {
        Chosen {
            info: pick.dup(),
            attrs: pick.attrs(),
            multi_recv: if self.multi {
                Ok(())
            } else {
                Err(self.notes_multi)
            },
            rma: if self.rma {
                Ok(())
            } else {
                Err(self.notes_rma)
            },
            atomics: if self.atomic {
                Ok(())
            } else {
                Err(self.notes_atomic)
            },
            ordered: self.order,
        }
    }
}

/// `fi_getinfo` with the wanted capabilities, dropping optional ones the provider lacks
/// (atomics, RMA, then multi-receive, then send-after-send ordering) instead of failing.
pub(crate) fn choose(s: &Settings, single_host: bool) -> Result<Chosen, InitError> {
    let mut want = Wants::new(s);
    loop {
        match InfoList::get(&want.hints(&s.provider)) {
            Ok(list) => {
                let entries = list.entries();
                let pick = pick(&entries, s, single_host)?;
                return Ok(want.chosen(pick));
            }
            Err(Errno::NODATA) if want.drop_one() => {}
            Err(e) => return Err(getinfo_error(s, e)),
        }
    }
}

/// The offer to open: the one `GEX_OFI_DOMAIN` names, else for one host the loopback
/// interface if offered, for several hosts the first offer that is not loopback.
fn pick<'a, 'b>(
    entries: &'b [InfoRef<'a>],
    s: &Settings,
    single_host: bool,
) -> Result<&'b InfoRef<'a>, InitError> {
    let pick = match &s.domain {
        Some(d) => entries.iter().find(|e| {
            let a = e.attrs();
            &a.domain == d || &a.fabric == d
        }),
        // One host: keep the traffic on the loopback interface if offered.
        None if single_host => entries
            .iter()
            .find(|e| e.attrs().domain == "lo")
            .or(entries.first()),
        // Several hosts: the loopback interface cannot reach the others.
        None => entries
            .iter()
            .find(|e| !is_loopback(&e.attrs()))
            .or(entries.first()),
    };
    pick.ok_or_else(|| {
        let offered: Vec<String> = entries
            .iter()
            .map(|e| {
                let a = e.attrs();
                format!("{} ({})", a.domain, a.fabric)
            })
            .collect();
        conduit_err(format!(
            "fi_getinfo(provider={}): no domain or fabric named {:?} (GEX_OFI_DOMAIN); offered: {}",
            s.provider_shown,
            s.domain.as_deref().unwrap_or(""),
            offered.join(", ")
        ))
    })
}

/// The error of a `fi_getinfo` that found nothing even without the optional capabilities.
fn getinfo_error(s: &Settings, e: Errno) -> InitError {
    let mut msg = format!(
        "fi_getinfo(provider={}, FI_EP_RDM, FI_MSG): {e}",
        s.provider_shown
    );
    if e == Errno::NODATA {
        msg.push_str(
            " (no such provider offers RDM endpoints here; `fi_info -t FI_EP_RDM` lists those that do; set GEX_OFI_PROVIDER)",
        );
    }
    if let Ok(fp) = std::env::var("FI_PROVIDER") {
        msg.push_str(&format!(
            " [libfabric's FI_PROVIDER={fp} also filters providers]"
        ));
    }
    conduit_err(msg)
}

/// Whether an offer is the loopback interface (tcp names it domain `lo`, fabric
/// `127.0.0.0/8` or `::1/128`).
pub(crate) fn is_loopback(a: &Attrs) -> bool {
    a.domain == "lo" || a.fabric.starts_with("127.") || a.fabric.starts_with("::1/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relaxed_puts_need_read_after_write_ordering() {
        let attrs = |provider: &str, rma_raw: bool, max_order_raw: usize| Attrs {
            provider: provider.into(),
            rma_raw,
            max_order_raw,
            ..Default::default()
        };
        // Data ordering up to a size: writes up to it are relaxed.
        assert_eq!(
            relaxed_limit(true, true, &attrs("verbs;ofi_rxm", true, 4096)),
            Ok(4096)
        );
        // tcp: message ordering suffices (one byte stream), any size.
        assert_eq!(
            relaxed_limit(true, true, &attrs("tcp;ofi_rxm", true, 0)),
            Ok(usize::MAX)
        );
        assert_eq!(
            relaxed_limit(true, true, &attrs("tcp", true, 0)),
            Ok(usize::MAX)
        );
        // Message ordering alone on another provider, or none at all: not relaxed.
        assert!(relaxed_limit(true, true, &attrs("verbs;ofi_rxm", true, 0)).is_err());
        assert!(relaxed_limit(true, true, &attrs("shm", false, 0)).is_err());
        assert!(relaxed_limit(true, true, &attrs("tcpx", true, 0)).is_err());
        // Switched off, or no native RMA.
        let off = relaxed_limit(true, false, &attrs("tcp;ofi_rxm", true, 0)).unwrap_err();
        assert!(off.contains("GEX_OFI_RELAXED_PUTS=0"), "{off}");
        assert!(relaxed_limit(false, true, &attrs("tcp;ofi_rxm", true, 0)).is_err());
    }

    #[test]
    fn loopback_offers_are_recognised() {
        let attrs = |domain: &str, fabric: &str| Attrs {
            provider: "tcp;ofi_rxm".into(),
            fabric: fabric.into(),
            domain: domain.into(),
            mr_mode: 0,
            inject_size: 64,
            max_msg_size: 1 << 20,
            threading: "FI_THREAD_SAFE",
            data_progress: "FI_PROGRESS_MANUAL",
            rma_raw: true,
            max_order_raw: 0,
            addr_str: false,
        };
        assert!(is_loopback(&attrs("lo", "127.0.0.1/32")));
        assert!(is_loopback(&attrs("x", "127.0.0.0/8")));
        assert!(is_loopback(&attrs("x", "::1/128")));
        assert!(!is_loopback(&attrs("eth0", "192.0.2.0/24")));
        assert!(!is_loopback(&attrs("gxv1a", "10.77.0.0/24")));
    }
}
