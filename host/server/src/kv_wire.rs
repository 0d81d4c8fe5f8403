//! vLLM's KV-event wire format: a batch of [`KvEvent`]s as the msgpack
//! payload vLLM's `ZmqEventPublisher` sends, so routers that consume vLLM's
//! events (llm-d's KV-cache manager, Dynamo) read Pagoda's unchanged.
//!
//! The layout follows `vllm/distributed/kv_events.py` (vllm-project/vllm,
//! the `msgspec` structs with `array_like=True, tag=True` of the 0.9–0.11
//! releases): every struct is a msgpack array of its fields in declaration
//! order, a tagged event starts with its class name, and trailing fields
//! left at their default are omitted.
//!
//! - batch: `[ts: float64 (Unix seconds), [event, ...], data_parallel_rank: 0]`
//! - `["BlockStored", block_hashes, parent_block_hash | nil, token_ids,
//!   block_size, lora_id: nil, medium: "GPU"]`
//! - `["BlockRemoved", block_hashes, medium: "GPU"]`
//! - `["AllBlocksCleared"]`
//!
//! `medium` names vLLM's primary KV tier (`MEDIUM_GPU`); Pagoda's KV cache
//! has one tier, on whatever device the backend runs. Consecutive stored
//! blocks that form a chain (each the parent of the next) travel as one
//! `BlockStored`, as vLLM sends a request's new blocks; consecutive removals
//! as one `BlockRemoved`.

use std::io;

use pagoda_engine::{CachedBlock, KvEvent, PAGE_SIZE};
use rmp::encode::{write_array_len, write_f64, write_nil, write_str, write_uint};

/// vLLM's name for the primary KV tier.
const MEDIUM: &str = "GPU";

/// Encodes one batch of events stamped `ts` (Unix seconds).
pub fn encode_batch(ts: f64, events: &[KvEvent]) -> io::Result<Vec<u8>> {
    let groups = group(events);
    let mut out = Vec::with_capacity(64 + events.len() * 96);
    write_array_len(&mut out, 3)?;
    write_f64(&mut out, ts)?;
    write_array_len(&mut out, len32(groups.len())?)?;
    for g in &groups {
        match g {
            Group::Stored(blocks) => stored(&mut out, blocks)?,
            Group::Removed(hashes) => {
                write_array_len(&mut out, 3)?;
                write_str(&mut out, "BlockRemoved")?;
                hash_list(&mut out, hashes.iter().copied())?;
                write_str(&mut out, MEDIUM)?;
            }
            Group::Cleared => {
                write_array_len(&mut out, 1)?;
                write_str(&mut out, "AllBlocksCleared")?;
            }
        }
    }
    write_uint(&mut out, 0)?;
    Ok(out)
}

/// Events merged the way vLLM sends them.
enum Group<'e> {
    Stored(Vec<&'e CachedBlock>),
    Removed(Vec<u64>),
    Cleared,
}

fn group(events: &[KvEvent]) -> Vec<Group<'_>> {
    let mut groups: Vec<Group<'_>> = Vec::new();
    for e in events {
        match (e, groups.last_mut()) {
            (KvEvent::Stored(b), Some(Group::Stored(chain)))
                if chain.last().map(|last| Some(last.hash)) == Some(b.parent) =>
            {
                chain.push(b);
            }
            (KvEvent::Stored(b), _) => groups.push(Group::Stored(vec![b])),
            (KvEvent::Removed(h), Some(Group::Removed(hashes))) => hashes.push(*h),
            (KvEvent::Removed(h), _) => groups.push(Group::Removed(vec![*h])),
            (KvEvent::AllCleared, _) => groups.push(Group::Cleared),
        }
    }
    groups
}

fn stored(out: &mut Vec<u8>, chain: &[&CachedBlock]) -> io::Result<()> {
    write_array_len(out, 7)?;
    write_str(out, "BlockStored")?;
    hash_list(out, chain.iter().map(|b| b.hash))?;
    match chain.first().and_then(|b| b.parent) {
        Some(parent) => {
            write_uint(out, parent)?;
        }
        None => write_nil(out)?,
    }
    write_array_len(out, len32(chain.len() * PAGE_SIZE)?)?;
    for block in chain {
        for &t in &block.tokens {
            write_uint(out, u64::from(t))?;
        }
    }
    write_uint(out, PAGE_SIZE as u64)?;
    write_nil(out)?; // lora_id
    write_str(out, MEDIUM)?;
    Ok(())
}

fn hash_list(out: &mut Vec<u8>, hashes: impl ExactSizeIterator<Item = u64>) -> io::Result<()> {
    write_array_len(out, len32(hashes.len())?)?;
    for h in hashes {
        write_uint(out, h)?;
    }
    Ok(())
}

fn len32(n: usize) -> io::Result<u32> {
    u32::try_from(n).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "array too long"))
}
