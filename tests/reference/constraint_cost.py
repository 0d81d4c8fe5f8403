"""What a structured-output constraint costs, against a live `pagoda serve`:
the time per output token (TPOT) of a plain streamed completion beside a
second plain one, and beside a constrained one (a JSON schema, whose mask
is computed every token), alternating, several rounds; and the
constrained request's own TPOT against the plain one's.

    python constraint_cost.py --base-url http://127.0.0.1:8000/v1 [--rounds 5] [--tokens 96]

Prints the medians and their ratios. Every request generates exactly
`--tokens` tokens (ignore_eos; the schema's strings are long enough).
"""

import argparse
import statistics
import threading
import time

import openai

SCHEMA = {
    "type": "object",
    "properties": {"notes": {"type": "array", "items": {"type": "string", "minLength": 40},
                             "minItems": 20}},
    "required": ["notes"],
    "additionalProperties": False,
}


def tpot(client, tokens, extra):
    """Seconds per token after the first, of one streamed completion."""
    stamps = []
    for chunk in client.completions.create(model="m", prompt="Write notes about the sea.\n", max_tokens=tokens,
                                           temperature=0, stream=True,
                                           extra_body={"ignore_eos": True, **extra}):
        if chunk.choices and chunk.choices[0].text:
            stamps.append(time.perf_counter())
    return (stamps[-1] - stamps[0]) / max(len(stamps) - 1, 1)


def pair(client, tokens, other):
    """The plain request's TPOT beside `other`, and `other`'s."""
    out = {}
    def run(key, extra):
        out[key] = tpot(client, tokens, extra)
    threads = [threading.Thread(target=run, args=("plain", {})),
               threading.Thread(target=run, args=("other", other))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out["plain"], out["other"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=96)
    args = ap.parse_args()
    client = openai.OpenAI(base_url=args.base_url, api_key="none", max_retries=0, timeout=600)
    constrained = {"guided_json": SCHEMA}
    tpot(client, 8, constrained)  # builds the vocabulary's trie once
    beside_plain, beside_constrained, plain_self, constrained_self = [], [], [], []
    for _ in range(args.rounds):
        a, b = pair(client, args.tokens, {})
        beside_plain.append(a)
        plain_self.append(b)
        a, b = pair(client, args.tokens, constrained)
        beside_constrained.append(a)
        constrained_self.append(b)
    med = statistics.median
    print(f"plain request's TPOT beside a plain one:       {1e3 * med(beside_plain):.2f} ms")
    print(f"plain request's TPOT beside a constrained one: {1e3 * med(beside_constrained):.2f} ms"
          f" ({med(beside_constrained) / med(beside_plain):.3f}x)")
    print(f"constrained request's own TPOT:                {1e3 * med(constrained_self):.2f} ms"
          f" ({med(constrained_self) / med(plain_self):.3f}x the plain one's)")


if __name__ == "__main__":
    main()
