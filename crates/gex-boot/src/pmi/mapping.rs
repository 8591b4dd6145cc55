//! The `PMI_process_mapping` value: which node every rank runs on (the format is
//! described on [`parse_process_mapping`]).

// The parent module allows `unsafe` for one borrow of an inherited descriptor;
// nothing here needs it.
#![deny(unsafe_code)]

use gex_core::boot::BootError;

/// One `(start, nodes, ranks_per_node)` block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Block {
    start: u32,
    nodes: u32,
    per_node: u32,
}

fn err(value: &str, why: &str) -> BootError {
    BootError::Protocol(format!("PMI_process_mapping {value:?}: {why}"))
}

/// A tiny cursor over the mapping string.
struct Cursor<'a> {
    s: &'a [u8],
    at: usize,
}

impl Cursor<'_> {
    fn skip_space(&mut self) {
        while self.s.get(self.at).is_some_and(|c| c.is_ascii_whitespace()) {
            self.at += 1;
        }
    }
    /// Consumes `c` (after optional whitespace) if it is next.
    fn eat(&mut self, c: u8) -> bool {
        self.skip_space();
        if self.s.get(self.at) == Some(&c) {
            self.at += 1;
            true
        } else {
            false
        }
    }
    fn word(&mut self) -> &str {
        self.skip_space();
        let start = self.at;
        while self
            .s
            .get(self.at)
            .is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'_' || *c == b'-')
        {
            self.at += 1;
        }
        std::str::from_utf8(&self.s[start..self.at]).unwrap_or("")
    }
    fn number(&mut self) -> Option<u32> {
        self.skip_space();
        let start = self.at;
        while self.s.get(self.at).is_some_and(u8::is_ascii_digit) {
            self.at += 1;
        }
        std::str::from_utf8(&self.s[start..self.at])
            .ok()?
            .parse()
            .ok()
    }
    fn at_end(&mut self) -> bool {
        self.skip_space();
        self.at == self.s.len()
    }
}

fn parse_blocks(value: &str) -> Result<Vec<Block>, BootError> {
    let mut c = Cursor {
        s: value.as_bytes(),
        at: 0,
    };
    if !c.eat(b'(') {
        return Err(err(value, "does not start with '('"));
    }
    let kind = c.word();
    if kind != "vector" {
        return Err(err(
            value,
            &format!("unsupported mapping type {kind:?} (only \"vector\" is known)"),
        ));
    }
    let mut blocks = Vec::new();
    while c.eat(b',') {
        if !c.eat(b'(') {
            return Err(err(value, "expected '(' to open a block"));
        }
        let mut fields = [None; 3];
        for (i, f) in fields.iter_mut().enumerate() {
            if i > 0 && !c.eat(b',') {
                return Err(err(value, "a block needs three numbers"));
            }
            *f = c.number();
        }
        let [Some(start), Some(nodes), Some(per_node)] = fields else {
            return Err(err(
                value,
                "block fields must be non-negative decimal numbers",
            ));
        };
        if !c.eat(b')') {
            return Err(err(value, "expected ')' to close a block"));
        }
        if nodes > 0 && start.checked_add(nodes - 1).is_none() {
            return Err(err(value, "node ids overflow"));
        }
        blocks.push(Block {
            start,
            nodes,
            per_node,
        });
    }
    if !c.eat(b')') {
        return Err(err(value, "expected ',' or the closing ')'"));
    }
    if !c.at_end() {
        return Err(err(value, "unexpected text after the closing ')'"));
    }
    if blocks.is_empty() {
        return Err(err(value, "no blocks"));
    }
    Ok(blocks)
}

/// Parses a `PMI_process_mapping` value and returns the node id of every rank of a
/// job of `size` ranks, or `None` for an empty value (the launcher cannot describe
/// the layout).
///
///
/// MPICH's Hydra and Slurm publish it in the job's KVS in the *vector* format:
///
/// ```text
/// mapping = "(" "vector" { "," block } ")"
/// block   = "(" start "," nodes "," ranks_per_node ")"
/// ```
///
/// with optional whitespace around every token and decimal integers. A block
/// `(start, nodes, ranks_per_node)` puts `ranks_per_node` consecutive ranks on node
/// `start`, the next `ranks_per_node` on node `start + 1`, and so on for `nodes`
/// nodes. Blocks are used in order; when they are exhausted before every rank has a
/// node, the list starts over (ranks are dealt round-robin). As in MPICH, once a
/// block starting at node 0 has been used, later rounds start at the first block
/// whose start is 0 (the blocks before it described nodes used only once, as in
/// a job that was spawned).
///
/// Examples, for 4 ranks: `(vector,(0,1,4))` and `(vector,(0,1,1))` are all on
/// node 0; `(vector,(0,2,2))` is nodes 0, 0, 1, 1; `(vector,(0,4,1))` and
/// `(vector,(0,2,1))` are 0, 1, 2, 3 and 0, 1, 0, 1.
///
/// ```
/// use gex_boot::pmi::parse_process_mapping;
///
/// assert_eq!(parse_process_mapping("(vector,(0,2,2))", 4)?, Some(vec![0, 0, 1, 1]));
/// assert_eq!(parse_process_mapping("(vector,(0,2,1))", 5)?, Some(vec![0, 1, 0, 1, 0]));
/// assert_eq!(parse_process_mapping("", 4)?, None);
/// # Ok::<(), gex_core::boot::BootError>(())
/// ```
///
/// # Errors
/// [`BootError::Protocol`] if the value is malformed, uses another format than
/// `vector`, or its blocks can never place a rank.
pub fn parse_process_mapping(value: &str, size: u32) -> Result<Option<Vec<u32>>, BootError> {
    if value.trim().is_empty() {
        return Ok(None);
    }
    let blocks = parse_blocks(value)?;
    let size = size as usize;
    // Not `with_capacity(size)` alone: `size` may be huge where the value is short.
    let mut ids = Vec::with_capacity(size.min(1 << 16));
    let place = |ids: &mut Vec<u32>, b: &Block| {
        if b.per_node == 0 {
            // Places nobody, however many nodes it has.
            return;
        }
        for node in 0..b.nodes {
            for _ in 0..b.per_node {
                if ids.len() == size {
                    return;
                }
                // No overflow: checked when parsing.
                ids.push(b.start + node);
            }
        }
    };
    // The first round uses every block in order.
    for b in &blocks {
        if ids.len() == size {
            break;
        }
        place(&mut ids, b);
    }
    // Later rounds start at the first block at node 0 if there is one, and use only
    // the blocks that place ranks, so that each pass over them places at least one
    // rank: the work stays proportional to the blocks plus the ranks.
    let from = blocks.iter().position(|b| b.start == 0).unwrap_or(0);
    let later: Vec<Block> = blocks[from..]
        .iter()
        .filter(|b| b.nodes > 0 && b.per_node > 0)
        .copied()
        .collect();
    if ids.len() < size && later.is_empty() {
        return Err(err(value, "its blocks place no rank"));
    }
    while ids.len() < size {
        for b in &later {
            if ids.len() == size {
                break;
            }
            place(&mut ids, b);
        }
    }
    Ok(Some(ids))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(v: &str, n: u32) -> Vec<u32> {
        parse_process_mapping(v, n)
            .unwrap_or_else(|e| panic!("{v:?}: {e}"))
            .unwrap_or_else(|| panic!("{v:?}: no mapping"))
    }

    /// Runs `f`, which must take under 20 s (linear time, not a step per empty node).
    #[track_caller]
    fn within_20s<T>(f: impl FnOnce() -> T) -> T {
        let t = std::time::Instant::now();
        let out = f();
        let took = t.elapsed();
        assert!(took < std::time::Duration::from_secs(20), "{took:?}");
        out
    }

    #[test]
    fn one_node() {
        // What Hydra publishes on one host, whatever the rank count.
        assert_eq!(map("(vector,(0,1,1))", 4), [0, 0, 0, 0]);
        assert_eq!(map("(vector,(0,1,4))", 4), [0, 0, 0, 0]);
        assert_eq!(map("(vector,(0,1,8))", 3), [0, 0, 0]);
        assert_eq!(map("(vector,(0,1,1))", 1), [0]);
    }

    #[test]
    fn blocks_of_several_nodes() {
        assert_eq!(map("(vector,(0,2,2))", 4), [0, 0, 1, 1]);
        assert_eq!(map("(vector,(0,4,1))", 4), [0, 1, 2, 3]);
        assert_eq!(map("(vector,(0,3,2))", 5), [0, 0, 1, 1, 2]);
    }

    #[test]
    fn round_robin_when_blocks_run_out() {
        assert_eq!(map("(vector,(0,2,1))", 5), [0, 1, 0, 1, 0]);
        assert_eq!(map("(vector,(0,2,2))", 6), [0, 0, 1, 1, 0, 0]);
    }

    #[test]
    fn several_blocks() {
        // Slurm-style: different numbers of ranks per node.
        assert_eq!(map("(vector,(0,2,2),(2,1,3))", 7), [0, 0, 1, 1, 2, 2, 2]);
        assert_eq!(map("(vector,(0,1,3),(1,2,1))", 5), [0, 0, 0, 1, 2]);
        // Wrapping over several blocks.
        assert_eq!(map("(vector,(0,1,1),(1,1,2))", 6), [0, 1, 1, 0, 1, 1]);
    }

    #[test]
    fn later_rounds_start_at_node_zero() {
        // MPICH's rule: the first block (node 1) is not reused once node 0 was seen.
        assert_eq!(map("(vector,(1,1,1),(0,2,2))", 7), [1, 0, 0, 1, 1, 0, 0]);
        // Without any block at node 0 the whole list repeats.
        assert_eq!(map("(vector,(3,2,1))", 5), [3, 4, 3, 4, 3]);
    }

    #[test]
    fn blocks_that_place_nobody_are_skipped() {
        assert_eq!(map("(vector,(5,0,4),(0,1,2))", 2), [0, 0]);
        assert_eq!(map("(vector,(0,3,0),(7,1,1))", 2), [7, 7]);
    }

    #[test]
    fn whitespace_is_allowed_between_tokens() {
        assert_eq!(
            map(" ( vector , ( 0 , 2 , 2 ) ,\t(2, 1, 3) ) ", 7),
            [0, 0, 1, 1, 2, 2, 2]
        );
    }

    #[test]
    fn extra_blocks_are_ignored() {
        assert_eq!(map("(vector,(0,4,1))", 2), [0, 1]);
        assert_eq!(map("(vector,(0,1,1),(1,1,1))", 0), Vec::<u32>::new());
    }

    /// Regression (found while writing the `pmi-mapping` fuzz target): every round over
    /// the blocks visited the blocks that place nobody again, so a value with many of
    /// them before a block that places one rank per round took rounds × blocks steps
    /// (here 200 000 × 100 000: minutes) instead of returning at once.
    #[test]
    fn blocks_that_place_nobody_do_not_slow_every_round() {
        let mut v = String::from("(vector");
        for _ in 0..100_000 {
            v.push_str(",(1,0,1)");
        }
        v.push_str(",(2,1,1))");
        let ids = within_20s(|| map(&v, 200_000));
        assert_eq!(ids.len(), 200_000);
        assert!(ids.iter().all(|&i| i == 2));
    }

    /// Regression (found by the `pmi-mapping` fuzz target, input
    /// `(vector,(0,1094232409,0))` for 4 ranks): the linear-time rewrite above walked
    /// the nodes of a block with 0 ranks per node, a billion steps for nothing.
    #[test]
    fn a_block_of_many_empty_nodes_is_skipped_at_once() {
        within_20s(|| {
            assert_eq!(map("(vector,(0,4000000000,0),(1,1,1))", 4), [1, 1, 1, 1]);
            assert!(parse_process_mapping("(vector,(0,1094232409,0))", 4).is_err());
        });
    }

    #[test]
    fn empty_means_unknown() {
        assert_eq!(parse_process_mapping("", 4).unwrap(), None);
        assert_eq!(parse_process_mapping("  ", 4).unwrap(), None);
    }

    #[test]
    fn malformed_values_are_errors() {
        for bad in [
            "vector,(0,1,1))",
            "(vector,(0,1,1)",
            "(vector,(0,1))",
            "(vector,(0,1,1,1))",
            "(vector,(0,1,-1))",
            "(vector,(0,x,1))",
            "(vector,(0,1,1.5))",
            "(vector,(0,1,1),)",
            "(vector(0,1,1))",
            "(vector)",
            "(hybrid,(0,1,1))",
            "(vectors,(0,1,1))",
            "(vector,(0,1,1))junk",
            "(vector,(4294967295,2,1))",
            "(vector,(0,99999999999,1))",
            "(vector,(0,0,1))",
            "(vector,(0,4,0))",
        ] {
            let r = parse_process_mapping(bad, 4);
            assert!(matches!(r, Err(BootError::Protocol(_))), "{bad:?}: {r:?}");
        }
    }
}
