"""A KV-event subscriber written against vLLM's wire format (pyzmq + msgpack),
independent of Pagoda's code: it mirrors the set of cached block hashes from
`pagoda serve --kv-events`, drives a prefix-sharing workload with evictions
over HTTP, and checks that

- cached tokens: a first prompt reports 0, the same prompt again reports its
  whole pages minus the last token (usage.prompt_tokens_details);
- the live mirror (PUB, with gaps filled from the replay socket) equals the
  server's GET /debug/kv_blocks after the workload, and evictions happened;
- a replay from seq 0 rebuilds the same set;
- every stored chain links to a cached parent, carries 16 tokens per block,
  and every root block holds the first 16 bytes of a prompt sent.

Prints one line per check ("ok ...") and exits non-zero on a failure.
"""

import argparse
import json
import random
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import msgpack
import zmq

END_SEQ = (-1).to_bytes(8, "big", signed=True)
BLOCK = 16


class Mirror:
    """The set of cached block hashes, rebuilt from event batches."""

    def __init__(self):
        self.blocks = {}  # hash -> tokens
        self.next_seq = 0
        self.removed = 0
        self.stored = 0
        self.roots = {}  # hash -> tokens of blocks without a parent

    def apply(self, seq, payload):
        assert seq == self.next_seq, f"batch {seq} out of order (expected {self.next_seq})"
        self.next_seq = seq + 1
        ts, events, dp_rank = msgpack.unpackb(payload, raw=False)
        assert isinstance(ts, float) and dp_rank == 0, (ts, dp_rank)
        for event in events:
            tag = event[0]
            if tag == "BlockStored":
                _, hashes, parent, tokens, block_size, lora_id, medium = event
                assert block_size == BLOCK and lora_id is None and medium == "GPU", event
                assert len(tokens) == BLOCK * len(hashes), event
                assert parent is None or parent in self.blocks, f"parent {parent} not cached"
                for i, h in enumerate(hashes):
                    self.blocks[h] = tokens[i * BLOCK:(i + 1) * BLOCK]
                    if i == 0 and parent is None:
                        self.roots[h] = tokens[:BLOCK]
                self.stored += len(hashes)
            elif tag == "BlockRemoved":
                _, hashes, medium = event
                assert medium == "GPU", event
                for h in hashes:
                    assert h in self.blocks, f"removed {h} was not cached"
                    del self.blocks[h]
                self.removed += len(hashes)
            elif tag == "AllBlocksCleared":
                assert len(event) == 1, event
                self.blocks.clear()
            else:
                raise AssertionError(f"unknown event {event!r}")


def replay(ctx, endpoint, start, mirror):
    """Asks the ROUTER for every batch from `start`; applies them."""
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoint)
    sock.send_multipart([b"", start.to_bytes(8, "big")])
    count = 0
    while True:
        if not sock.poll(10_000):
            raise AssertionError("replay timed out")
        empty, seq, payload = sock.recv_multipart()
        assert empty == b""
        if seq == END_SEQ:
            assert payload == b""
            break
        mirror.apply(int.from_bytes(seq, "big"), payload)
        count += 1
    sock.close()
    return count


def post(base, prompt, max_tokens):
    body = json.dumps({"model": "m", "prompt": prompt, "max_tokens": max_tokens,
                       "temperature": 0}).encode()
    req = urllib.request.Request(base + "/v1/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.load(r)


def drain(sub, ctx, args, mirror, quiet_ms):
    """Applies live batches until none comes for `quiet_ms`; a gap (such as
    the batches published before the subscription took hold) is filled from
    the replay socket, as vLLM's subscribers do."""
    while sub.poll(quiet_ms):
        _topic, seq_bytes, payload = sub.recv_multipart()
        seq = int.from_bytes(seq_bytes, "big")
        if seq < mirror.next_seq:
            continue  # already had it from a replay
        if seq > mirror.next_seq:
            replay(ctx, args.replay, mirror.next_seq, mirror)
            if seq < mirror.next_seq:
                continue
        mirror.apply(seq, payload)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--http", required=True)
    p.add_argument("--pub", required=True)
    p.add_argument("--replay", required=True)
    args = p.parse_args()

    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.LINGER, 0)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.connect(args.pub)
    time.sleep(0.5)  # let the subscription reach the publisher
    mirror = Mirror()

    # Cached tokens: a fresh prompt, then the same again.
    prompt = "A unique opening line that no other prompt shares, 1234567!"
    first = post(args.http, prompt, 4)["usage"]
    second = post(args.http, prompt, 4)["usage"]
    want = (len(prompt.encode()) - 1) // BLOCK * BLOCK
    got = (first["prompt_tokens_details"]["cached_tokens"],
           second["prompt_tokens_details"]["cached_tokens"])
    assert got == (0, want), f"cached tokens {got}, want (0, {want})"
    print(f"ok cached tokens 0 then {want} of {len(prompt)}")

    # Prefix-sharing workload, more than the pool holds: evictions.
    rng = random.Random(5)
    systems = [f"System prompt number {i}: answer briefly and politely. " for i in range(4)]
    prompts = [prompt]
    for i in range(24):
        prompts.append(rng.choice(systems) + f"Question {i}: what is {rng.randint(0, 10**6)}?")
    with ThreadPoolExecutor(4) as pool:
        for r in pool.map(lambda q: post(args.http, q, 8), prompts[1:]):
            assert r["choices"][0]["finish_reason"] in ("length", "stop"), r
    drain(sub, ctx, args, mirror, 1500)

    with urllib.request.urlopen(args.http + "/debug/kv_blocks", timeout=30) as r:
        server = set(json.load(r)["block_hashes"])
    live = set(mirror.blocks)
    assert mirror.removed > 0, "the workload evicted nothing: lower --kv-pages"
    assert live == server, (f"live mirror {len(live)} blocks, server {len(server)}: "
                            f"{len(live - server)} extra, {len(server - live)} missing")
    heads = {p.encode()[:BLOCK] for p in prompts}
    for h, tokens in mirror.roots.items():
        assert bytes(tokens) in heads, f"root block {h} holds {tokens}, no prompt starts so"
    print(f"ok live mirror equals the server: {len(server)} blocks after "
          f"{mirror.stored} stored, {mirror.removed} removed, {mirror.next_seq} batches")

    fresh = Mirror()
    batches = replay(ctx, args.replay, 0, fresh)
    assert set(fresh.blocks) == server, (f"replay from 0: {len(fresh.blocks)} blocks, "
                                         f"server {len(server)}")
    print(f"ok replay from seq 0 rebuilds the same {len(server)} blocks from {batches} batches")
    sub.close()
    ctx.term()


if __name__ == "__main__":
    try:
        main()
    except AssertionError as e:
        print(f"FAIL {e}", file=sys.stderr)
        sys.exit(1)
