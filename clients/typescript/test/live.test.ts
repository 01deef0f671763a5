/**
 * The client against a live Nexum: the seed's flow (`compileFor`: a context compiled for a task and a model;
 * `gateTaskCompletion`: a check contract registered, a completion refused by the gate, then allowed), a PUT
 * whose answer is lost written once, typed 409 and 422 errors, and the event stream resumed with Last-Event-ID.
 *
 * `tests/e2e/test_typescript_client.py` starts the server and runs these with NEXUM_URL, the agent's and the
 * operator's tokens, and NEXUM_WORKSPACE (the project's workspace folder, where the file checks look).
 */

import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { test } from "node:test";

import { Conflict, Forbidden, Nexum, Refused, Unauthorized, type StreamEvent } from "../src/index.js";

const url = process.env.NEXUM_URL;
const skip = url ? false : "NEXUM_URL is not set: tests/e2e/test_typescript_client.py runs these against a live server";

function env(name: string): string {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set`);
  return value;
}

const agent = (options = {}): Nexum => new Nexum(env("NEXUM_URL"), env("NEXUM_AGENT_TOKEN"), options);
const operator = (options = {}): Nexum => new Nexum(env("NEXUM_URL"), env("NEXUM_OPERATOR_TOKEN"), options);

/** A goal of one task, planned by the operator; the task's id. */
async function plannedTask(objective: string): Promise<string> {
  const goal = await operator().createGoal(`Goal: ${objective}`, { tasks: [{ key: "only", objective }] });
  const task = goal.tasks.find((planned) => planned.key === "only");
  assert.ok(task, "the goal has its task");
  return task.id;
}

/** The log's last position now (the feed's last event). */
async function headPosition(client: Nexum): Promise<number> {
  let head = 0;
  for await (const event of client.events({ limit: 500 })) head = event.position;
  return head;
}

async function eventTypesAfter(client: Nexum, position: number): Promise<string[]> {
  const types: string[] = [];
  for await (const event of client.events({ cursor: position, limit: 500 })) types.push(event.type);
  return types;
}

/**
 * A `fetch` that passes requests on but loses the answer of the first one `lost` matches: the server did
 * the work, the client hears nothing (the connection dropped). It records each matching request's key.
 */
function losingFirstAnswer(lost: (method: string, url: string) => boolean) {
  const keys: (string | null)[] = [];
  const lossy: typeof fetch = async (input, init) => {
    const response = await fetch(input, init);
    if (lost(init?.method ?? "GET", String(input))) {
      keys.push(new Headers(init?.headers).get("Idempotency-Key"));
      if (keys.length === 1) {
        await response.arrayBuffer();
        throw new TypeError("fetch failed", { cause: new Error("the connection dropped before the answer arrived") });
      }
    }
    return response;
  };
  return { fetch: lossy, keys };
}

test("compileFor: a context compiled for a task and a model carries its objective and facts", { skip }, async () => {
  const taskId = await plannedTask("Make verify_token refuse expired tokens");
  const client = agent();
  await client.start(taskId);
  await client.recordFact("verify_token ignores the expiry claim", { taskId, subject: "verify_token" });
  await client.recordToolCall(taskId, "run_tests", "1 failed: test_expired_token_is_refused", {
    arguments: { path: "tests" },
  });

  const context = await client.compile(taskId, "local");

  assert.equal(context.task_id, taskId);
  assert.match(context.prompt_block, /Make verify_token refuse expired tokens/);
  assert.match(context.prompt_block, /verify_token ignores the expiry claim/);
  assert.ok(context.total_tokens > 0 && context.total_tokens <= Number(context.budget.context_tokens));
  assert.ok(context.request_id);
  assert.equal((await client.context(context.digest)).prompt_block, context.prompt_block);
  const excluded = [];
  for await (const record of client.excluded(context.digest)) excluded.push(record);
  assert.equal(excluded.length, context.exclusions.count);
});

test("gateTaskCompletion: the contract's checks, not the answer, decide", { skip }, async () => {
  const taskId = await plannedTask("Write the release report");
  const report = join(env("NEXUM_WORKSPACE"), `report-${randomUUID()}.md`);
  const name = report.slice(env("NEXUM_WORKSPACE").length + 1);
  const registered = await operator().registerContract(taskId, {
    checks: [
      { kind: "file_exists", name: "report written", path: name },
      { kind: "file_matches", name: "report has a result", path: name, pattern: "(?m)^## Result" },
    ],
  });
  assert.equal(registered.trust_class, "repository_authored");
  const client = agent();

  await client.start(taskId);
  const refused = await client.complete(taskId, "Done: the report is written");
  assert.equal(refused.outcome, "failed");
  assert.deepEqual(refused.failing_checks.sort(), ["report has a result", "report written"]);
  assert.equal(refused.completion?.answer, "Done: the report is written");

  await writeFile(report, "# Release\n\n## Result\nshipped\n");
  try {
    const retry = await client.start(taskId);
    assert.equal(retry.attempt, 2);
    const decided = await client.complete(taskId, "written");
    assert.equal(decided.outcome, "completed");
    assert.deepEqual(
      decided.check_runs.map((run) => [run.name, run.passed]).sort(),
      [["report has a result", true], ["report written", true]],
    );
    assert.equal((await client.task(taskId)).state, "completed");
    const late = await client.complete(taskId, "again");
    assert.equal(late.outcome, "skipped"); // only a running task is gated
    assert.equal(late.request_id, null);
  } finally {
    await rm(report, { force: true });
  }
});

test("a PUT whose answer was lost is retried with the same Idempotency-Key and written once", { skip }, async () => {
  const taskId = await plannedTask("Deploy to staging");
  const before = await headPosition(agent());
  const lossy = losingFirstAnswer((method, target) => method === "PUT" && target.endsWith("/contract"));
  const client = operator({ fetch: lossy.fetch, backoffMs: 10 });

  const contract = await client.registerContract(taskId, {
    checks: [{ kind: "file_exists", name: "deployed", path: "deployed.txt" }],
  });

  assert.equal(lossy.keys.length, 2);
  assert.ok(lossy.keys[0] && lossy.keys[0] === lossy.keys[1], "the retry carried the first attempt's key");
  assert.equal(contract.revision, 1);
  assert.deepEqual(await eventTypesAfter(agent(), before), ["ContractRegistered"]);
});

test("a POST whose answer was lost is written once", { skip }, async () => {
  const taskId = await plannedTask("Record a finding");
  await agent().start(taskId);
  const before = await headPosition(agent());
  const lossy = losingFirstAnswer((method, target) => method === "POST" && target.endsWith("/facts"));

  const fact = await agent({ fetch: lossy.fetch, backoffMs: 10 }).recordFact("the spec expects 401", { taskId });

  assert.ok(lossy.keys[0] && lossy.keys[0] === lossy.keys[1]);
  assert.equal(fact.text, "the spec expects 401");
  assert.deepEqual(await eventTypesAfter(agent(), before), ["FactRecorded"]);
});

test("409 and 422 arrive typed, with code, field, status and request id", { skip }, async () => {
  const taskId = await plannedTask("Check the typed errors");
  const client = agent();
  const key = randomUUID();
  await client.request("POST", `tasks/${taskId}/facts`, { json: { text: "first" }, idempotencyKey: key });
  await assert.rejects(
    client.request("POST", `tasks/${taskId}/facts`, { json: { text: "another" }, idempotencyKey: key }),
    (error: unknown) => {
      assert.ok(error instanceof Conflict, String(error));
      assert.equal(error.code, "idempotency_key_reused");
      assert.equal(error.status, 409);
      assert.ok(error.requestId);
      return true;
    },
  );
  await client.start(taskId);
  await assert.rejects(client.start(taskId), (error: unknown) => {
    assert.ok(error instanceof Conflict && error.code === "illegal_transition", String(error));
    return true;
  });

  const other = await plannedTask("Run a forbidden program");
  await assert.rejects(
    operator().registerContract(other, {
      checks: [{ kind: "command", name: "sneaky", argv: ["/usr/bin/definitely-not-allowed", "--now"] }],
    }),
    (error: unknown) => {
      assert.ok(error instanceof Refused, String(error));
      assert.equal(error.code, "denied_executable");
      assert.equal(error.status, 422);
      assert.match(error.field ?? "", /^contract\.checks\[0\]/);
      return true;
    },
  );
  await assert.rejects(
    client.registerContract(other, { checks: [] }),
    (error: unknown) => error instanceof Forbidden && error.code === "forbidden",
  );
});

test("the event stream resumes after Last-Event-ID: every event once, in order", { skip }, async () => {
  const taskId = await plannedTask("Follow the stream");
  const client = agent();
  const start = await headPosition(client);
  for (const text of ["one", "two", "three"]) await client.recordFact(`fact ${text}`, { taskId });
  const expected: number[] = [];
  for await (const event of client.events({ cursor: start })) expected.push(event.position);
  assert.equal(expected.length, 3);

  // The first connection is left after two events; a new stream resumes after the last id received.
  const first: StreamEvent[] = [];
  for await (const message of client.eventStream({ after: start, timeoutS: 0, reconnect: false })) {
    first.push(message);
    if (first.length === 2) break;
  }
  const resumed: StreamEvent[] = [];
  const lastId = first.at(-1)?.id;
  assert.ok(lastId !== undefined);
  for await (const message of client.eventStream({ lastEventId: lastId, timeoutS: 0, reconnect: false })) resumed.push(message);
  assert.deepEqual([...first, ...resumed].map((message) => message.id), expected);
  assert.deepEqual(
    resumed.map((message) => [message.type, message.event.data.text]),
    [["FactRecorded", "fact three"]],
  );
});

test("the event stream reconnects by itself with Last-Event-ID and gets what was appended", { skip }, async () => {
  const taskId = await plannedTask("Reconnect");
  const writer = agent();
  const start = await headPosition(writer);
  await writer.recordFact("before", { taskId });
  // Each connection sends what is there and closes (timeout 0); "after" is written just before the second
  // connection is made, so only a reconnection after "before" can bring it.
  const sent: (string | null)[] = [];
  const recording: typeof fetch = async (input, init) => {
    if (String(input).includes("/events/stream")) {
      sent.push(new Headers(init?.headers).get("Last-Event-ID"));
      if (sent.length === 2) await writer.recordFact("after", { taskId });
    }
    return fetch(input, init);
  };
  const reader = agent({ fetch: recording });

  const received: StreamEvent[] = [];
  for await (const message of reader.eventStream({ after: start, timeoutS: 0, reconnectDelayMs: 20 })) {
    received.push(message);
    if (message.event.data.text === "after") break;
  }

  assert.deepEqual(
    received.map((message) => message.event.data.text),
    ["before", "after"],
  );
  const ids = received.map((message) => message.id);
  assert.ok(ids[0]! < ids[1]!);
  assert.equal(sent[0], null); // the first connection starts from `after`
  assert.deepEqual(sent, [null, String(ids[0])]); // the second resumed after "before", and brought "after"
});

test("a stream with an unknown token is Unauthorized at once", { skip }, async () => {
  const stranger = new Nexum(env("NEXUM_URL"), "nx_not_a_token");
  await assert.rejects(
    (async () => {
      for await (const message of stranger.eventStream()) assert.fail(`got ${message.type}`);
    })(),
    (error: unknown) => error instanceof Unauthorized && error.status === 401,
  );
});
