/**
 * Retries and typed errors without a server: a scripted `fetch` answers each attempt, and records what the
 * client sent.
 */

import assert from "node:assert/strict";
import { test } from "node:test";

import {
  BadRequest,
  ConnectionFailed,
  Conflict,
  Nexum,
  NexumError,
  Refused,
  ServerError,
  Unavailable,
} from "../src/index.js";

type Step = { status: number; body?: unknown; headers?: Record<string, string> } | Error;

/** A `fetch` that answers the scripted steps in turn and records each request's method, URL and headers. */
function scripted(steps: Step[]) {
  const sent: { method: string; url: string; headers: Headers; body: string | null }[] = [];
  const fetchStub: typeof fetch = async (input, init) => {
    sent.push({
      method: init?.method ?? "GET",
      url: String(input),
      headers: new Headers(init?.headers),
      body: typeof init?.body === "string" ? init.body : null,
    });
    const step = steps.shift();
    if (step === undefined) throw new Error("the script has no more answers");
    if (step instanceof Error) throw step;
    const text = step.body === undefined ? "" : typeof step.body === "string" ? step.body : JSON.stringify(step.body);
    return new Response(text === "" ? null : text, { status: step.status, headers: step.headers });
  };
  const slept: number[] = [];
  const sleep = async (ms: number): Promise<void> => {
    slept.push(ms);
  };
  return { fetch: fetchStub, sent, slept, sleep };
}

const error = (status: number, code: string, field: string | null = null) => ({
  status,
  body: { error: { code, message: `${code} happened`, field, details: { why: code }, request_id: "req-1" } },
});

test("a write is retried after a dropped connection and 503s with one Idempotency-Key", async () => {
  const script = scripted([
    new TypeError("fetch failed"),
    { status: 503, body: error(503, "database_unavailable").body, headers: { "Retry-After": "2" } },
    { status: 200, body: { id: "t1", state: "running" } },
  ]);
  const nexum = new Nexum("http://nexum.test/", "nx_token", { ...script, backoffMs: 10 });
  const task = await nexum.start("t1", { reason: "go" });

  assert.equal(task.state, "running");
  assert.equal(script.sent.length, 3);
  const keys = script.sent.map((request) => request.headers.get("Idempotency-Key"));
  assert.ok(keys[0] && keys.every((key) => key === keys[0]), `one key across the retries: ${keys.join(", ")}`);
  assert.equal(script.sent[0]?.url, "http://nexum.test/api/v1/tasks/t1/start");
  assert.equal(script.sent[0]?.headers.get("Authorization"), "Bearer nx_token");
  assert.deepEqual(JSON.parse(script.sent[0]?.body ?? ""), { reason: "go" });
  assert.deepEqual(script.slept, [10, 2000]); // the backoff, then the server's Retry-After
});

test("each call of a write gets its own key; a read carries none; a key given is sent as given", async () => {
  const script = scripted([
    { status: 201, body: { id: "f1" } },
    { status: 201, body: { id: "f2" } },
    { status: 200, body: { id: "t1" } },
    { status: 201, body: { id: "g1", tasks: [] } },
  ]);
  const nexum = new Nexum("http://nexum.test", "nx", script);
  await nexum.recordFact("one", { taskId: "t1" });
  await nexum.recordFact("two", { taskId: "t1" });
  await nexum.task("t1");
  await nexum.createGoal("Ship", { tasks: [{ key: "a", objective: "do" }], idempotencyKey: "plan-7" });

  const keys = script.sent.map((request) => request.headers.get("Idempotency-Key"));
  assert.ok(keys[0] && keys[1] && keys[0] !== keys[1]);
  assert.equal(keys[2], null);
  assert.equal(keys[3], "plan-7");
});

test("reads after a write carry its position, so a replica serves them only once it has it", async () => {
  const answers = (): Step[] => [
    { status: 200, body: { id: "t1" } },
    { status: 201, body: { id: "f1" }, headers: { "Nexum-Position": "12" } },
    { status: 201, body: { id: "f2" }, headers: { "Nexum-Position": "9" } },
    { status: 200, body: { id: "t1" } },
  ];
  const script = scripted(answers());
  const nexum = new Nexum("http://nexum.test", "nx", script);
  await nexum.task("t1");
  await nexum.recordFact("one", { taskId: "t1" });
  await nexum.recordFact("two", { taskId: "t1" }); // an older position never lowers the one remembered
  await nexum.task("t1");
  const sent = script.sent.map((request) => request.headers.get("Nexum-Min-Position"));
  assert.deepEqual(sent, [null, null, "12", "12"]);

  const off = scripted(answers());
  const quiet = new Nexum("http://nexum.test", "nx", { ...off, readYourWrites: false });
  await quiet.task("t1");
  await quiet.recordFact("one", { taskId: "t1" });
  await quiet.recordFact("two", { taskId: "t1" });
  await quiet.task("t1");
  assert.deepEqual(
    off.sent.map((request) => request.headers.get("Nexum-Min-Position")),
    [null, null, null, null],
  );
});

test("no answer on every attempt is ConnectionFailed naming the attempts", async () => {
  const script = scripted([new TypeError("fetch failed"), new TypeError("fetch failed"), new TypeError("fetch failed")]);
  const nexum = new Nexum("http://nexum.test", "nx", { ...script, retries: 2 });
  await assert.rejects(nexum.task("t1"), (thrown: unknown) => {
    assert.ok(thrown instanceof ConnectionFailed);
    assert.equal(thrown.code, "connection_failed");
    assert.equal(thrown.status, null);
    assert.match(thrown.message, /no answer after 3 attempts/);
    return true;
  });
});

test("a 503 still there after the last retry is thrown as Unavailable", async () => {
  const answer = { ...error(503, "database_unavailable"), headers: { "Retry-After": "1" } };
  const script = scripted([answer, answer]);
  const nexum = new Nexum("http://nexum.test", "nx", { ...script, retries: 1 });
  await assert.rejects(nexum.task("t1"), Unavailable);
  assert.equal(script.sent.length, 2);
});

test("error answers are typed by status, with code, field, details, status and request id", async () => {
  const script = scripted([
    error(400, "unknown_field", "colour"),
    error(409, "idempotency_key_reused"),
    error(422, "denied_executable", "contract.checks[0].argv"),
    { status: 500, body: "<html>proxy</html>", headers: { "X-Request-ID": "from-header" } },
  ]);
  const nexum = new Nexum("http://nexum.test", "nx", script);
  const caught: NexumError[] = [];
  for (let i = 0; i < 4; i += 1) {
    await nexum.task("t1").catch((thrown: NexumError) => caught.push(thrown));
  }
  const [bad, conflict, refused, server] = caught;
  assert.ok(bad instanceof BadRequest && bad.field === "colour" && bad.status === 400 && bad.requestId === "req-1");
  assert.deepEqual(bad.details, { why: "unknown_field" });
  assert.ok(conflict instanceof Conflict && conflict.code === "idempotency_key_reused");
  assert.ok(refused instanceof Refused && refused.field === "contract.checks[0].argv");
  assert.ok(server instanceof ServerError && server.code === "http_500" && server.requestId === "from-header");
  assert.match(String(bad), /unknown_field: unknown_field happened \(field colour\) \[request req-1\]/);
});

test("a scope is a task or a goal, exactly one", () => {
  const nexum = new Nexum("http://nexum.test", "nx", scripted([]));
  // @ts-expect-error: the types refuse both; the check at run time refuses what JavaScript callers send
  assert.throws(() => nexum.recordFact("x", { taskId: "t", goalId: "g" }), /exactly one/);
});
