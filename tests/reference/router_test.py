"""Two `pagoda serve` replicas behind SGLang's router (PyPI `sglang-router`).

For each policy (default: cache_aware, then round_robin) this starts two
fresh replicas of the embedded model on ephemeral ports, each with a small
KV pool, puts `sglang_router.launch_router` in front of them, and sends a
prefix-heavy workload through the router over loopback: many distinct long
prefixes, several requests each, shuffled, a few at a time, streamed. It
checks that every request is answered in OpenAI's shape and that both
replicas served traffic, then reads each replica's `/metrics` for the
fleet's prefix-cache hit rate (`vllm:prefix_cache_hits_total /
vllm:prefix_cache_queries_total`, summed over replicas), and stops the
replicas with SIGTERM (each must exit 0: its audit is clean).

A cache-aware router keeps each prefix on one replica, so the fleet holds
every prefix once; round robin sends each prefix to both, so each replica
would need the whole set and, with the small pool, evicts.

Prints one JSON object per policy and exits 1 on any failed check
(including cache_aware's hit rate falling below round_robin's).
"""

import argparse
import asyncio
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time

import httpx2 as httpx


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Replica:
    def __init__(self, binary, kv_pages):
        self.proc = subprocess.Popen(
            [binary, "serve", "--port", "0", "--threads", "1", "--kv-pages", str(kv_pages)],
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines = []
        ready = threading.Event()

        def read():
            for line in self.proc.stderr:
                self.lines.append(line.rstrip())
                if "listening on " in line:
                    self.url = line.split("listening on ", 1)[1].strip()
                    ready.set()
            ready.set()

        threading.Thread(target=read, daemon=True).start()
        if not ready.wait(60) or not hasattr(self, "url"):
            raise RuntimeError(f"replica did not start: {self.lines}")

    def stop(self):
        """SIGTERM; the exit status (0: drained with a clean audit)."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return None


def counter(text, name):
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            total += float(line.rsplit(" ", 1)[1])
    return total


def start_router(python, policy, urls):
    port = free_port()
    log = open(os.devnull, "w")
    proc = subprocess.Popen(
        [python, "-m", "sglang_router.launch_router", "--host", "127.0.0.1", "--port", str(port),
         "--policy", policy, "--worker-urls", *urls, "--log-level", "warn",
         "--disable-retries", "--disable-circuit-breaker"],
        stdout=log,
        stderr=log,
    )
    return proc, f"http://127.0.0.1:{port}"


async def wait_router(client, proc, want, seconds=60):
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the router exited with {proc.returncode}")
        try:
            r = await client.get("/workers")
            if r.status_code == 200:
                workers = r.json().get("workers", [])
                if sum(1 for w in workers if w.get("is_healthy")) >= want:
                    return
        except httpx.HTTPError:
            pass
        await asyncio.sleep(0.2)
    raise RuntimeError("the router did not register both workers in time")


def workload(args):
    rng = random.Random(args.seed)
    alphabet = "abcdefghijklmnopqrstuvwxyz "
    prefixes = [
        f"doc {p:03}: " + "".join(rng.choice(alphabet) for _ in range(args.prefix_len))
        for p in range(args.prefixes)
    ]
    requests = [
        prefixes[p] + f" question {q}: " + "".join(rng.choice(alphabet) for _ in range(8))
        for p in range(args.prefixes)
        for q in range(args.per_prefix)
    ]
    rng.shuffle(requests)
    return requests


async def one(client, prompt, max_tokens, failures, ttft):
    body = {"model": "embedded", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
            "stream": True, "stream_options": {"include_usage": True}}
    started = time.perf_counter()
    first = None
    done, reasons, usage, objects = 0, [], None, set()
    async with client.stream("POST", "/v1/completions", json=body) as r:
        if r.status_code != 200:
            await r.aread()
            failures.append(f"status {r.status_code}: {r.text[:200]}")
            return
        async for line in r.aiter_lines():
            if not line.startswith("data: "):
                continue
            data = line[6:]
            if data == "[DONE]":
                done += 1
                continue
            chunk = json.loads(data)
            objects.add(chunk.get("object"))
            usage = chunk.get("usage") or usage
            for choice in chunk.get("choices", []):
                first = first or time.perf_counter()
                if choice.get("finish_reason"):
                    reasons.append(choice["finish_reason"])
    if done != 1 or reasons != ["length"] or objects != {"text_completion"}:
        failures.append(f"stream: [DONE]x{done}, reasons {reasons}, objects {objects}")
    elif not usage or usage.get("completion_tokens") != max_tokens:
        failures.append(f"usage {usage}")
    elif first is not None:
        ttft.append(first - started)


async def run_policy(args, policy):
    replicas = [Replica(args.pagoda, args.kv_pages) for _ in range(2)]
    router, base = start_router(args.python, policy, [r.url for r in replicas])
    failures, ttft = [], []
    try:
        limits = httpx.Limits(max_connections=args.concurrency + 4)
        async with httpx.AsyncClient(base_url=base, timeout=60, limits=limits) as client:
            await wait_router(client, router, 2)
            # One plain request through the router: OpenAI's shape.
            r = await client.post("/v1/completions", json={"model": "embedded", "prompt": "hello", "max_tokens": 2})
            shape = r.json() if r.status_code == 200 else {}
            if shape.get("object") != "text_completion" or len(shape.get("choices", [])) != 1 \
                    or "usage" not in shape:
                failures.append(f"plain response: {r.status_code} {r.text[:200]}")
            # SGLang's native API through the router: text and meta_info.
            r = await client.post("/generate", json={"text": "hello", "sampling_params": {"max_new_tokens": 3}})
            native = r.json() if r.status_code == 200 else {}
            meta = native.get("meta_info", {})
            if not isinstance(native.get("text"), str) or meta.get("completion_tokens") != 3 \
                    or meta.get("finish_reason", {}).get("type") != "length":
                failures.append(f"/generate response: {r.status_code} {r.text[:200]}")
            prompts = workload(args)
            queue = asyncio.Queue()
            for p in prompts:
                queue.put_nowait(p)

            async def worker():
                while not queue.empty():
                    await one(client, queue.get_nowait(), args.max_tokens, failures, ttft)

            started = time.perf_counter()
            await asyncio.gather(*(worker() for _ in range(args.concurrency)))
            elapsed = time.perf_counter() - started
        hits = queries = 0.0
        served = []
        async with httpx.AsyncClient(timeout=10) as direct:
            for replica in replicas:
                text = (await direct.get(replica.url + "/metrics")).text
                hits += counter(text, "vllm:prefix_cache_hits_total")
                queries += counter(text, "vllm:prefix_cache_queries_total")
                served.append(counter(text, "vllm:request_success_total"))
    finally:
        router.terminate()
        try:
            router.wait(10)
        except subprocess.TimeoutExpired:
            router.kill()
        statuses = [r.stop() for r in replicas]
    if any(s != 0 for s in statuses):
        failures.append(f"replica exit statuses {statuses} (0: clean audit)")
    if len(ttft) != len(prompts):
        failures.append(f"{len(ttft)} of {len(prompts)} requests answered completely")
    if min(served) < 1:
        failures.append(f"requests per replica {served}: one served nothing")
    ttft.sort()
    pct = lambda q: round(ttft[min(len(ttft) - 1, int(q * len(ttft)))] * 1000, 2) if ttft else None  # noqa: E731
    return {
        "policy": policy,
        "requests": len(prompts),
        "answered": len(ttft),
        "per_replica": served,
        "prefix_cache_hits": hits,
        "prefix_cache_queries": queries,
        "hit_rate": round(hits / queries, 4) if queries else 0.0,
        "ttft_ms": {"p50": pct(0.5), "p99": pct(0.99)},
        "seconds": round(elapsed, 2),
        "failures": failures[:20],
    }


async def main(args):
    results = []
    for policy in args.policies:
        results.append(await run_policy(args, policy))
        print(json.dumps(results[-1]), flush=True)
    failed = any(r["failures"] for r in results)
    rates = {r["policy"]: r["hit_rate"] for r in results}
    if "cache_aware" in rates and "round_robin" in rates and rates["cache_aware"] < rates["round_robin"]:
        print(f"cache_aware's hit rate {rates['cache_aware']} is below round_robin's {rates['round_robin']}",
              file=sys.stderr)
        failed = True
    for r in results:
        for f in r["failures"]:
            print(f"{r['policy']}: {f}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--pagoda", required=True, help="the `pagoda` binary")
    p.add_argument("--python", default=sys.executable, help="a Python with sglang-router")
    p.add_argument("--policies", nargs="+", default=["cache_aware", "round_robin"])
    p.add_argument("--prefixes", type=int, default=24)
    p.add_argument("--prefix-len", type=int, default=384, help="characters (tokens for the embedded model)")
    p.add_argument("--per-prefix", type=int, default=6)
    p.add_argument("--max-tokens", type=int, default=4)
    p.add_argument("--kv-pages", type=int, default=400, help="per replica (16 tokens each)")
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    sys.exit(asyncio.run(main(p.parse_args())))
