// The inference suite's client: the official OpenAI Node package (pinned in
// package.json), run by the Go tests of this directory. It takes a plan as
// its one argument, JSON:
//
//   {"baseURL": "...", "apiKey": "...", "timeoutMs": N, "maxRetries": N,
//    "calls": [{"kind": "chat" | "embeddings", "model": "...",
//               "max_tokens": N, "stream": bool, "abortAfter": N,
//               "input": ..., "delayMs": N, "prompt": "...",
//               "apiKey": "...", "maxRetries": N}, ...]}
//
// runs the calls at once (each after its delayMs; a call's apiKey and
// maxRetries over the plan's), and prints one JSON array of their
// outcomes, in order: {ok, status, chunks, usage, data, headers} (the
// Capgate-* and retry headers of the answer), or {ok: false, status, code,
// type, name, error, headers} for an error the client raised; each with
// its ms and attempts (the requests the client sent for it, its retries
// included). A streamed call with abortAfter aborts its stream after that
// many chunks of content.
import OpenAI from "openai";

const plan = JSON.parse(process.argv[2]);

// clientFor returns a client of its own for call c, whose fetch counts
// the requests sent for the call in counter.n.
function clientFor(c, counter) {
  return new OpenAI({
    baseURL: plan.baseURL,
    apiKey: c.apiKey ?? plan.apiKey,
    timeout: plan.timeoutMs ?? 60_000,
    maxRetries: c.maxRetries ?? plan.maxRetries ?? 2,
    fetch: (url, init) => {
      counter.n++;
      return fetch(url, init);
    },
  });
}

// picked are the answer's headers the tests read.
function picked(headers) {
  const out = {};
  for (const [k, v] of headers) {
    if (k.startsWith("capgate-") || k === "idempotent-replayed" || k.startsWith("retry-after") ||
      k === "x-should-retry" || k === "ratelimit") out[k] = v;
  }
  return out;
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function run(c) {
  const started = Date.now();
  const counter = { n: 0 };
  const client = clientFor(c, counter);
  const done = (v) => Object.assign(v, { ms: Date.now() - started, attempts: counter.n });
  try {
    if (c.kind === "embeddings") {
      const { data, response } = await client.embeddings.create({ model: c.model, input: c.input }).withResponse();
      return done({ ok: true, status: response.status, data: data.data.length, headers: picked(response.headers) });
    }
    const params = {
      model: c.model,
      messages: [{ role: "user", content: c.prompt ?? "Write a poem about the sea." }],
      temperature: 1,
    };
    if (c.max_tokens) params.max_tokens = c.max_tokens;
    if (!c.stream) {
      const { data, response } = await client.chat.completions.create(params).withResponse();
      return done({ ok: true, status: response.status, usage: data.usage, headers: picked(response.headers) });
    }
    const controller = new AbortController();
    const { data: stream, response } = await client.chat.completions
      .create({ ...params, stream: true, stream_options: { include_usage: true } }, { signal: controller.signal })
      .withResponse();
    let chunks = 0;
    let usage = null;
    try {
      for await (const chunk of stream) {
        if (chunk.usage) usage = chunk.usage;
        if (chunk.choices.length > 0 && chunk.choices[0].delta?.content) chunks++;
        if (c.abortAfter && chunks >= c.abortAfter) {
          controller.abort();
          break;
        }
      }
    } catch (e) {
      if (!c.abortAfter) throw e;
    }
    return done({ ok: true, status: response.status, chunks, usage, aborted: !!c.abortAfter, headers: picked(response.headers) });
  } catch (e) {
    return done({ ok: false, status: e.status ?? null, code: e.code ?? null, type: e.type ?? null,
      name: e.constructor.name, error: String(e.message), headers: e.headers ? picked(e.headers) : {} });
  }
}

const results = await Promise.all(plan.calls.map(async (c) => {
  if (c.delayMs) await sleep(c.delayMs);
  return run(c);
}));
process.stdout.write(JSON.stringify(results) + "\n");
