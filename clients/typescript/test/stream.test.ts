/**
 * The event stream and the gate's polling without a server: a scripted `fetch` answers each connection with
 * a body it writes (and may cut off), and records the `Last-Event-ID` each connection sent.
 */

import assert from "node:assert/strict";
import { test } from "node:test";

import { ConnectionFailed, Nexum, TooManyRequests, Unauthorized, type StreamEvent } from "../src/index.js";

/** An SSE body: the frames, then either the end of the body or, with `cut`, a dropped connection. */
function body(frames: string[], cut = false): ReadableStream<Uint8Array> {
  const encoder = new TextEncoder();
  const left = [...frames];
  return new ReadableStream<Uint8Array>({
    pull(controller) {
      const frame = left.shift();
      if (frame !== undefined) controller.enqueue(encoder.encode(frame));
      else if (cut) controller.error(new TypeError("terminated", { cause: new Error("other side closed") }));
      else controller.close();
    },
  });
}

const event = (position: number, type = "FactRecorded"): string =>
  `id: ${position}\nevent: ${type}\ndata: ${JSON.stringify({ position, type, stream_id: "s", data: {} })}\n\n`;

type Connection = { status: number; frames?: string[]; cut?: boolean; headers?: Record<string, string>; json?: unknown };

function streaming(connections: Connection[]) {
  const sent: { lastEventId: string | null; url: URL }[] = [];
  const fetchStub: typeof fetch = async (input, init) => {
    sent.push({ lastEventId: new Headers(init?.headers).get("Last-Event-ID"), url: new URL(String(input)) });
    const next = connections.shift();
    if (next === undefined) throw new Error("the script has no more connections");
    if (next.json !== undefined) return Response.json(next.json, { status: next.status, headers: next.headers });
    return new Response(body(next.frames ?? [], next.cut), { status: next.status, headers: next.headers });
  };
  const slept: number[] = [];
  const sleep = async (ms: number): Promise<void> => {
    slept.push(ms);
  };
  return { fetch: fetchStub, sent, slept, sleep };
}

async function take(stream: AsyncGenerator<StreamEvent>, count: number): Promise<number[]> {
  const ids: number[] = [];
  for await (const message of stream) {
    ids.push(message.id);
    if (ids.length === count) break;
  }
  return ids;
}

test("a closed connection is resumed after the announced retry with Last-Event-ID", async () => {
  const script = streaming([
    { status: 200, frames: ["retry: 250\n\n", event(4), event(5)] },
    { status: 200, frames: ["retry: 250\n\n", ": keep-alive\n\n", event(6)] },
  ]);
  const nexum = new Nexum("http://nexum.test", "nx", script);

  assert.deepEqual(await take(nexum.eventStream({ after: 3, timeoutS: 10 }), 3), [4, 5, 6]);
  assert.deepEqual(
    script.sent.map((connection) => connection.lastEventId),
    [null, "5"],
  );
  assert.equal(script.sent[0]?.url.searchParams.get("after"), "3");
  assert.equal(script.sent[0]?.url.searchParams.get("timeout"), "10");
  assert.equal(script.sent[1]?.url.searchParams.get("after"), null); // Last-Event-ID says where
  assert.deepEqual(script.slept, [250]);
});

test("a connection dropped mid-stream is resumed after the last event received", async () => {
  const script = streaming([
    { status: 200, frames: [event(10), "id: 11\ndata: {\"cut"], cut: true },
    { status: 200, frames: [event(11), event(12)] },
  ]);
  const nexum = new Nexum("http://nexum.test", "nx", { ...script, backoffMs: 5 });

  assert.deepEqual(await take(nexum.eventStream({ lastEventId: 9 }), 3), [10, 11, 12]);
  assert.deepEqual(
    script.sent.map((connection) => connection.lastEventId),
    ["9", "10"],
  );
  assert.deepEqual(script.slept, [5]); // the backoff, not the reconnect delay
});

test("429 too_many_streams waits the server's Retry-After, and is thrown once the retries are spent", async () => {
  const busy = { status: 429, json: { error: { code: "too_many_streams", message: "4 open" } }, headers: { "Retry-After": "3" } };
  const script = streaming([busy, { status: 200, frames: [event(1)] }]);
  const nexum = new Nexum("http://nexum.test", "nx", script);
  assert.deepEqual(await take(nexum.eventStream(), 1), [1]);
  assert.deepEqual(script.slept, [3000]);

  const always = streaming([busy, busy]);
  const refused = new Nexum("http://nexum.test", "nx", { ...always, retries: 1 });
  await assert.rejects(take(refused.eventStream(), 1), (error: unknown) => {
    assert.ok(error instanceof TooManyRequests && error.code === "too_many_streams" && error.status === 429);
    return true;
  });
});

test("a revoked token ends the stream with Unauthorized; a server that never answers is ConnectionFailed", async () => {
  const revoked = streaming([
    {
      status: 200,
      frames: [event(1), 'event: error\ndata: {"error":{"code":"authentication_failed","message":"revoked"}}\n\n'],
    },
  ]);
  const received: number[] = [];
  await assert.rejects(
    (async () => {
      for await (const message of new Nexum("http://nexum.test", "nx", revoked).eventStream()) received.push(message.id);
    })(),
    (error: unknown) => error instanceof Unauthorized && error.code === "authentication_failed",
  );
  assert.deepEqual(received, [1]);

  const down: typeof fetch = async () => {
    throw new TypeError("fetch failed");
  };
  const unreachable = new Nexum("http://nexum.test", "nx", { fetch: down, retries: 2, sleep: async () => undefined });
  await assert.rejects(take(unreachable.eventStream(), 1), ConnectionFailed);
});

test("reconnect: false ends with the first connection; aborting the signal ends the iteration", async () => {
  const once = streaming([{ status: 200, frames: [event(1), event(2)] }]);
  const ids: number[] = [];
  for await (const message of new Nexum("http://nexum.test", "nx", once).eventStream({ reconnect: false })) {
    ids.push(message.id);
  }
  assert.deepEqual(ids, [1, 2]);

  const stop = new AbortController();
  const forever = streaming([{ status: 200, frames: [event(1)] }, { status: 200, frames: [event(2)] }]);
  const seen: number[] = [];
  for await (const message of new Nexum("http://nexum.test", "nx", forever).eventStream({ signal: stop.signal })) {
    seen.push(message.id);
    if (message.id === 2) stop.abort();
  }
  assert.deepEqual(seen, [1, 2]);
  assert.equal(forever.sent.length, 2);
});

test("a pending completion is polled until the gate decides; a pending one already there is followed", async () => {
  const completion = (outcome: string) => ({
    request_id: "r1",
    task_id: "t1",
    status: outcome === "pending" ? "pending" : "decided",
    outcome,
    reason: outcome === "completed" ? "all 1 checks passed" : "",
    failing_checks: [],
    answer: "done",
    check_runs: [],
  });
  const answers = [
    Response.json(
      { outcome: "pending", reason: "", task: { id: "t1" }, completion: completion("pending"), poll: "/api/v1/completions/r1" },
      { status: 202 },
    ),
    Response.json(completion("pending")),
    Response.json(completion("completed")),
    Response.json(
      { error: { code: "completion_pending", message: "pending", details: { request_id: "r1" } } },
      { status: 409 },
    ),
    Response.json(completion("completed")),
  ];
  const urls: string[] = [];
  const fetchStub: typeof fetch = async (input) => {
    urls.push(new URL(String(input)).pathname);
    const answer = answers.shift();
    assert.ok(answer, "the script has no more answers");
    return answer;
  };
  const nexum = new Nexum("http://nexum.test", "nx", { fetch: fetchStub, sleep: async () => undefined });

  const decided = await nexum.complete("t1", "done");
  assert.equal(decided.outcome, "completed");
  assert.equal(decided.reason, "all 1 checks passed");
  const followed = await nexum.complete("t1", "again");
  assert.equal(followed.request_id, "r1");
  assert.deepEqual(urls, [
    "/api/v1/tasks/t1/complete",
    "/api/v1/completions/r1",
    "/api/v1/completions/r1",
    "/api/v1/tasks/t1/complete",
    "/api/v1/completions/r1",
  ]);
});

test("a base URL with a path of its own keeps it", async () => {
  const urls: string[] = [];
  const fetchStub: typeof fetch = async (input) => {
    urls.push(String(input));
    return Response.json({ id: "t1" });
  };
  await new Nexum("https://example.test/nexum/", "nx", { fetch: fetchStub }).task("t1");
  assert.deepEqual(urls, ["https://example.test/nexum/api/v1/tasks/t1"]);
});
