"""Load test of a live `pagoda serve` (or any OpenAI-compatible server).

N concurrent clients each send M completions in turn, streamed or not, over
loopback; some streaming clients hang up mid-stream at random. Every request
that was not abandoned must get exactly one complete response (status 200,
one choice, one finish reason, `usage` equal to what was asked, a stream
ending in exactly one `data: [DONE]`), and no response id may repeat.
Afterwards `/metrics` must show nothing running and nothing waiting, and,
given `--pid`, the server's peak RSS must stay under `--rss-limit-mib`.

Prompts are token ids (so any model with at least 256 tokens takes them and
`usage.prompt_tokens` is known exactly); `--trace` replays the JSON Lines
trace `pagoda bench --save-trace` writes instead, so the server's figures
compare with the offline bench's on the same requests.

Prints one JSON object: counts, throughput (requests/s, output tokens/s),
TTFT, TPOT and end-to-end latency percentiles (streamed requests), and the
server's RSS and thread count (sampled every 50 ms).
Exits 1 with the failures on stderr when any check fails.
"""

import argparse
import asyncio
import json
import random
import sys
import time

import httpx2 as httpx


def percentiles(values):
    if not values:
        return None
    s = sorted(values)

    def at(q):
        return s[min(len(s) - 1, int(q * len(s)))]

    return {"p50": at(0.50), "p90": at(0.90), "p99": at(0.99), "n": len(s)}


def workload(args, rng):
    """(prompt ids, max_tokens) per request, in submission order."""
    if args.trace:
        out = []
        with open(args.trace, encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    entry = json.loads(line)
                    out.append((entry["prompt_tokens"], int(entry["max_tokens"])))
        return out
    lo, hi = args.prompt_len
    mlo, mhi = args.max_tokens
    # A system prompt every request shares (as chat front-ends send), then
    # the request's own tokens.
    shared = [rng.randrange(32, 127) for _ in range(args.shared_prefix)]
    return [
        (shared + [rng.randrange(32, 127) for _ in range(rng.randint(lo, hi))], rng.randint(mlo, mhi))
        for _ in range(args.clients * args.requests)
    ]


class Run:
    def __init__(self):
        self.failures = []
        self.ids = []
        self.completed = 0
        self.disconnected = 0
        self.streamed = 0
        self.output_tokens = 0
        self.ttft = []
        self.tpot = []
        self.e2e = []
        self.outcome = {}

    def fail(self, number, message):
        self.failures.append(f"request {number}: {message}")
        self.outcome[number] = "failed"

    def ok(self, number, what):
        if number in self.outcome:
            self.fail(number, f"a second outcome ({what} after {self.outcome[number]})")
        else:
            self.outcome[number] = what


async def plain(client, run, number, body):
    started = time.perf_counter()
    r = await client.post("/v1/completions", json=body)
    if r.status_code != 200:
        return run.fail(number, f"status {r.status_code}: {r.text[:200]}")
    value = r.json()
    run.ids.append(value.get("id"))
    choices = value.get("choices", [])
    if len(choices) != 1 or choices[0].get("finish_reason") not in ("length", "stop"):
        return run.fail(number, f"bad choices {choices!r:.200}")
    if not check_usage(run, number, value.get("usage"), body, choices[0]["finish_reason"]):
        return
    run.e2e.append(time.perf_counter() - started)
    run.completed += 1
    run.ok(number, "completed")


def check_usage(run, number, usage, body, reason):
    """Whether `usage` matches what was asked (a failure is recorded)."""
    if not usage:
        run.fail(number, "no usage")
        return False
    if usage.get("prompt_tokens") != len(body["prompt"]):
        run.fail(number, f"prompt_tokens {usage.get('prompt_tokens')} != {len(body['prompt'])}")
        return False
    got = usage.get("completion_tokens")
    if not isinstance(got, int) or got < 1 or got > body["max_tokens"]:
        run.fail(number, f"completion_tokens {got!r}")
        return False
    if reason == "length" and got != body["max_tokens"]:
        run.fail(number, f"completion_tokens {got} != max_tokens {body['max_tokens']}")
        return False
    run.output_tokens += got
    return True


async def streamed(client, run, number, body, hang_up_after):
    body = dict(body, stream=True, stream_options={"include_usage": True})
    started = time.perf_counter()
    first = last = None
    ids, reasons, usages, done, after_done, content = set(), [], [], 0, 0, 0
    async with client.stream("POST", "/v1/completions", json=body) as r:
        if r.status_code != 200:
            await r.aread()
            return run.fail(number, f"status {r.status_code}: {r.text[:200]}")
        async for line in r.aiter_lines():
            if not line.startswith("data: "):
                continue
            data = line[len("data: "):]
            if done:
                after_done += 1
                continue
            if data == "[DONE]":
                done += 1
                continue
            chunk = json.loads(data)
            if "error" in chunk:
                return run.fail(number, f"error event {chunk['error']}")
            ids.add(chunk.get("id"))
            if chunk.get("usage"):
                usages.append(chunk["usage"])
            for choice in chunk.get("choices", []):
                now = time.perf_counter()
                first = first or now
                last = now
                content += 1
                if choice.get("finish_reason"):
                    reasons.append(choice["finish_reason"])
            if hang_up_after is not None and content >= hang_up_after:
                break  # leaving the block closes the connection mid-stream
    run.ids.extend(ids)
    if hang_up_after is not None and not done:
        run.disconnected += 1
        return run.ok(number, "disconnected")
    if len(ids) != 1:
        return run.fail(number, f"chunk ids {ids}")
    if done != 1 or after_done:
        return run.fail(number, f"[DONE] {done} times, {after_done} events after it")
    if len(reasons) != 1 or reasons[0] not in ("length", "stop"):
        return run.fail(number, f"finish reasons {reasons}")
    if len(usages) != 1:
        return run.fail(number, f"{len(usages)} usage chunks")
    if not check_usage(run, number, usages[0], body, reasons[0]):
        return
    tokens = usages[0]["completion_tokens"]
    run.streamed += 1
    run.completed += 1
    run.ok(number, "completed")
    run.e2e.append(time.perf_counter() - started)
    if first is not None:
        run.ttft.append(first - started)
        if tokens > 1:
            run.tpot.append((last - first) / (tokens - 1))


async def client_loop(client, run, jobs, args, rng):
    for number, (prompt, max_tokens) in jobs:
        body = {
            "model": args.model,
            "prompt": prompt,
            "max_tokens": max_tokens,
            "temperature": 0,
            "seed": number,
        }
        if args.ignore_eos:
            body["ignore_eos"] = True
        try:
            if rng.random() < args.stream_fraction:
                hang_up = rng.randint(1, 3) if rng.random() < args.disconnect_fraction else None
                await streamed(client, run, number, body, hang_up)
            else:
                await plain(client, run, number, body)
        except (httpx.HTTPError, ValueError) as e:
            run.fail(number, f"{type(e).__name__}: {e}")


def read_status(pid, key):
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


async def sample(pid, peak):
    """Keeps the server's peak RSS (KiB) and thread count in `peak`."""
    while True:
        for i, key in enumerate(("VmRSS", "Threads")):
            value = read_status(pid, key)
            if value is not None:
                peak[i] = max(peak[i], value)
        await asyncio.sleep(0.05)


def gauge(text, name):
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return None


async def idle_after(client, seconds=10.0):
    """Running and waiting from /metrics once both are 0, or the last seen."""
    deadline = time.perf_counter() + seconds
    while True:
        text = (await client.get("/metrics")).text
        running = gauge(text, "vllm:num_requests_running")
        waiting = gauge(text, "vllm:num_requests_waiting")
        if (running == 0 and waiting == 0) or time.perf_counter() > deadline:
            return running, waiting
        await asyncio.sleep(0.05)


async def main(args):
    rng = random.Random(args.seed)
    requests = workload(args, rng)
    jobs = [[] for _ in range(args.clients)]
    for number, request in enumerate(requests):
        jobs[number % args.clients].append((number, request))
    run = Run()
    limits = httpx.Limits(max_connections=args.clients + 4, max_keepalive_connections=args.clients + 4)
    timeout = httpx.Timeout(args.timeout)
    peak = [0, 0]
    async with httpx.AsyncClient(base_url=args.base_url, limits=limits, timeout=timeout) as client:
        sampler = asyncio.create_task(sample(args.pid, peak)) if args.pid else None
        rss_before = read_status(args.pid, "VmRSS") if args.pid else None
        threads_before = read_status(args.pid, "Threads") if args.pid else None
        started = time.perf_counter()
        await asyncio.gather(
            *(client_loop(client, run, j, args, random.Random(args.seed * 1000 + i)) for i, j in enumerate(jobs))
        )
        elapsed = time.perf_counter() - started
        running, waiting = await idle_after(client)
        if sampler:
            sampler.cancel()
    if running != 0 or waiting != 0:
        run.failures.append(f"/metrics after the run: running {running}, waiting {waiting}")
    if len(set(run.ids)) != len(run.ids):
        run.failures.append(f"{len(run.ids) - len(set(run.ids))} duplicate response ids")
    missing = len(requests) - len(run.outcome)
    if missing:
        run.failures.append(f"{missing} requests got no outcome")
    hwm = read_status(args.pid, "VmHWM") if args.pid else None
    if args.pid and args.rss_limit_mib and max(peak[0], hwm or 0) > args.rss_limit_mib * 1024:
        run.failures.append(f"server RSS peaked at {max(peak[0], hwm or 0)} KiB, over {args.rss_limit_mib} MiB")
    ms = lambda p: p and {k: (round(v * 1000, 3) if k != "n" else v) for k, v in p.items()}  # noqa: E731
    report = {
        "clients": args.clients,
        "requests": len(requests),
        "completed": run.completed,
        "streamed": run.streamed,
        "disconnected": run.disconnected,
        "failed": len(run.failures),
        "seconds": round(elapsed, 3),
        "requests_per_s": round(run.completed / elapsed, 3),
        "output_tokens": run.output_tokens,
        "output_tokens_per_s": round(run.output_tokens / elapsed, 1),
        "ttft_ms": ms(percentiles(run.ttft)),
        "tpot_ms": ms(percentiles(run.tpot)),
        "e2e_ms": ms(percentiles(run.e2e)),
        "rss_kib": {"before": rss_before, "peak_sampled": peak[0], "vm_hwm": hwm} if args.pid else None,
        "threads": {"before": threads_before, "peak_sampled": peak[1]} if args.pid else None,
        "metrics_after": {"running": running, "waiting": waiting},
    }
    print(json.dumps(report))
    for failure in run.failures[:50]:
        print(failure, file=sys.stderr)
    return 1 if run.failures else 0


def pair(text):
    lo, _, hi = text.partition(":")
    return int(lo), int(hi or lo)


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--base-url", required=True, help="e.g. http://127.0.0.1:8000 (no /v1)")
    p.add_argument("--model", default="pagoda")
    p.add_argument("--clients", type=int, default=64)
    p.add_argument("--requests", type=int, default=8, help="per client (ignored with --trace)")
    p.add_argument("--trace", help="JSON Lines from `pagoda bench --save-trace` to replay")
    p.add_argument("--prompt-len", type=pair, default=(16, 96), help="MIN:MAX prompt tokens")
    p.add_argument("--shared-prefix", type=int, default=0,
                   help="tokens of a prefix every prompt starts with (a shared system prompt)")
    p.add_argument("--max-tokens", type=pair, default=(8, 32), help="MIN:MAX output tokens")
    p.add_argument("--stream-fraction", type=float, default=0.5)
    p.add_argument("--disconnect-fraction", type=float, default=0.15, help="of streamed requests")
    p.add_argument("--pid", type=int, help="the server's pid, for its RSS")
    p.add_argument("--rss-limit-mib", type=float, help="fail when the server's peak RSS exceeds this")
    p.add_argument("--timeout", type=float, default=120.0)
    p.add_argument("--ignore-eos", action="store_true",
                   help="generate max_tokens whatever the model samples (as the offline bench does)")
    p.add_argument("--seed", type=int, default=0)
    sys.exit(asyncio.run(main(p.parse_args())))
