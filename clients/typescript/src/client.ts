/**
 * `Nexum`: an agent loop's calls to Nexum's REST API (`/api/v1/`) over `fetch`, typed from the OpenAPI schema.
 *
 * Retries. A request that gets no answer (the connection failed, was dropped or timed out) or a 429, 502, 503
 * or 504 is sent again, up to `retries` more times, waiting `backoffMs` × 1, 2, 4 … (at most `backoffMaxMs`,
 * or the server's `Retry-After`, as a 503 `database_unavailable` sends it). Every write (POST, PUT, PATCH,
 * DELETE) carries an `Idempotency-Key` made once per call and sent again with each of its retries, so a write
 * whose answer was lost is written once: the server answers the retry as it answered the first. Errors are
 * thrown as typed `NexumError`s (`errors.ts`) carrying `code`, `field`, `details`, `status` and `requestId`.
 *
 * Read-your-writes. A server with a read replica answers compiles and reads from it; the client remembers the
 * `Nexum-Position` of its last write's answer and sends it as `Nexum-Min-Position` on every later request, so
 * what it reads includes what it wrote (the server waits a bounded time for the replica, then reads from the
 * primary). `readYourWrites: false` sends nothing: reads may then miss the newest writes.
 *
 * Names: the methods are the Python client's (`nexum_client`) in camelCase; members of a request body or an
 * answer are spelled as the API spells them (`expected_version`, `trust_class`, `prompt_block`), typed from the
 * schema; the client's own options are camelCase (`taskId`, `goalId`, `idempotencyKey`, `wait`, `timeoutMs`).
 */

import {
  CompletionTimeout,
  Conflict,
  ConnectionFailed,
  NexumError,
  Unauthorized,
  errorFromAnswer,
} from "./errors.js";
import { sseItems } from "./sse.js";
import type {
  Answer,
  ApiPath,
  CompileRequest,
  CompiledAnswer,
  CompiledContext,
  Completion,
  CompletionResult,
  Contract,
  Goal,
  GoalPlan,
  Item,
  JsonBody,
  Method,
  Optional,
  PathParameters,
  PlannedTask,
  Query,
  RegisteredContract,
  Resolution,
  Schemas,
  StoredEvent,
  Task,
} from "./types.js";

const API_PREFIX = "/api/v1/";
const RETRY_STATUSES = new Set([429, 502, 503, 504]);
const SAFE_METHODS = new Set(["GET", "HEAD", "OPTIONS"]);
const DECIDED_OUTCOMES = new Set(["completed", "failed", "blocked", "skipped"]);
/** How long a stream waits before reconnecting when the server has not said (`retry:`). */
const DEFAULT_RECONNECT_MS = 1000;

export interface NexumOptions {
  /** Per request, until the whole answer is read (default 60 s). */
  timeoutMs?: number;
  /** How many more times a request without an answer, or with a 429/502/503/504, is sent (default 3). */
  retries?: number;
  backoffMs?: number;
  backoffMaxMs?: number;
  /** Replaces the global `fetch` (tests inject lost answers through it). */
  fetch?: typeof fetch;
  sleep?: (ms: number) => Promise<void>;
  /** Send the last write's `Nexum-Position` as `Nexum-Min-Position` on every request (default true). */
  readYourWrites?: boolean;
}

export interface RequestOptions {
  json?: unknown;
  query?: Record<string, string | number | boolean | null | undefined>;
  idempotencyKey?: string;
}

export interface ApiAnswer<Body = unknown> {
  status: number;
  body: Body;
  headers: Headers;
}

type QueryOf<P extends ApiPath, M extends Method> = [Query<P, M>] extends [never] ? undefined : Query<P, M>;

interface CallOptions<P extends ApiPath, M extends Method> {
  path?: PathParameters<P, M>;
  query?: QueryOf<P, M>;
  json?: JsonBody<P, M>;
  idempotencyKey?: string | undefined;
}

/** The body of a transition (`start`, `fail`, `block`): `expected_version`, `reason`. */
export type TransitionOptions = Optional<JsonBody<"/api/v1/tasks/{task_id}/start", "post">>;
/** Where a world-state item is recorded: on one task or on a goal (shared by its tasks), exactly one. */
export type Scope = { taskId: string; goalId?: undefined } | { goalId: string; taskId?: undefined };
type TrustClass = Schemas["TrustClassEnum"];

/** The gate's decision on a completion request, as `complete()` returns it once decided (or pending). */
export interface GateDecision {
  /** `completed`, `failed`, `blocked`, `skipped` (the task was not running: nothing recorded) or `pending`. */
  outcome: string;
  reason: string;
  task_id: string;
  /** The completion request's id; null for `skipped`, which records nothing. */
  request_id: string | null;
  failing_checks: string[];
  check_runs: Schemas["CheckRun"][];
  /** The request as the server records it (the model's `answer`, versions, times); null for `skipped`. */
  completion: Completion | null;
}

/** One message of the event stream: the log position (`id:`), the event's type and the event itself. */
export interface StreamEvent {
  id: number;
  type: string;
  event: StoredEvent;
}

export interface EventStreamOptions {
  /** Start after this log position (default 0, the log's start). */
  after?: number;
  /** Resume after this position (sent as `Last-Event-ID`, which wins over `after`). */
  lastEventId?: number;
  /** Seconds each connection stays open (the server's `?timeout=`; at most its `NEXUM_EVENT_STREAM_MAX_S`). */
  timeoutS?: number;
  /** Reconnect with `Last-Event-ID` when a connection ends or drops (default true); false: one connection. */
  reconnect?: boolean;
  /** Wait between connections; default: what the server announced with `retry:` (1 s). */
  reconnectDelayMs?: number;
  /** Aborting it ends the iteration. */
  signal?: AbortSignal;
}

const defaultSleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

function describe(error: unknown): string {
  if (error instanceof Error) {
    const cause = error.cause instanceof Error ? `: ${error.cause.message}` : "";
    return `${error.name}: ${error.message}${cause}`;
  }
  return String(error);
}

function fillPath(template: string, parameters: Record<string, unknown> | undefined): string {
  return template.replace(/\{(\w+)\}/g, (_, name: string) => {
    const value = parameters?.[name];
    if (value === undefined || value === null || value === "") {
      throw new TypeError(`${template}: the path parameter ${name} is missing`);
    }
    return encodeURIComponent(String(value));
  });
}

/** A client of one Nexum server with one token (an agent's or an operator's). */
export class Nexum {
  readonly baseUrl: string;
  readonly retries: number;
  readonly backoffMs: number;
  readonly backoffMaxMs: number;
  readonly timeoutMs: number;
  readonly readYourWrites: boolean;
  /** The highest `Nexum-Position` an answer carried: where this client's writes reached. */
  lastPosition = 0;
  private readonly token: string;
  private readonly fetchImpl: typeof fetch;
  private readonly sleep: (ms: number) => Promise<void>;

  constructor(baseUrl: string, token: string, options: NexumOptions = {}) {
    this.baseUrl = baseUrl.replace(/\/+$/, "");
    this.token = token;
    this.timeoutMs = options.timeoutMs ?? 60_000;
    this.retries = options.retries ?? 3;
    this.backoffMs = options.backoffMs ?? 500;
    this.backoffMaxMs = options.backoffMaxMs ?? 8_000;
    this.fetchImpl = options.fetch ?? globalThis.fetch.bind(globalThis);
    this.sleep = options.sleep ?? defaultSleep;
    this.readYourWrites = options.readYourWrites ?? true;
  }

  // --- the one way requests are made -----------------------------------------------------------------------

  /**
   * Send a request (retried as the module's comment says) and decode its JSON answer. `path` is relative to
   * `/api/v1/` (`tasks/…/facts`). Throws a `NexumError` for an error answer, `ConnectionFailed` for none.
   */
  async request<Body = unknown>(method: string, path: string, options: RequestOptions = {}): Promise<ApiAnswer<Body>> {
    const verb = method.toUpperCase();
    const headers: Record<string, string> = { Authorization: `Bearer ${this.token}`, Accept: "application/json" };
    if (!SAFE_METHODS.has(verb)) headers["Idempotency-Key"] = options.idempotencyKey ?? crypto.randomUUID();
    if (this.readYourWrites && this.lastPosition > 0) headers["Nexum-Min-Position"] = String(this.lastPosition);
    let body: string | undefined;
    if (options.json !== undefined) {
      body = JSON.stringify(options.json);
      headers["Content-Type"] = "application/json";
    }
    const url = this.url(path, options.query);
    for (let attempt = 0; ; attempt += 1) {
      const last = attempt >= this.retries;
      let status: number;
      let answerHeaders: Headers;
      let text: string;
      try {
        const response = await this.fetchImpl(url, {
          method: verb,
          headers,
          body,
          signal: AbortSignal.timeout(this.timeoutMs),
        });
        status = response.status;
        answerHeaders = response.headers;
        text = await response.text();
        this.notePosition(answerHeaders.get("Nexum-Position"));
      } catch (error) {
        if (last) {
          throw new ConnectionFailed(`${verb} ${path}: no answer after ${attempt + 1} attempts: ${describe(error)}`, {
            code: "connection_failed",
            cause: error,
          });
        }
        await this.sleep(this.backoffDelay(attempt, null));
        continue;
      }
      if (RETRY_STATUSES.has(status) && !last) {
        await this.sleep(this.backoffDelay(attempt, answerHeaders.get("Retry-After")));
        continue;
      }
      let decoded: unknown = null;
      if (text !== "") {
        try {
          decoded = JSON.parse(text);
        } catch {
          decoded = null; // a proxy's HTML page: the status still gives a typed error below
        }
      }
      if (status >= 400) throw errorFromAnswer(status, decoded, answerHeaders.get("X-Request-ID"));
      return { status, body: decoded as Body, headers: answerHeaders };
    }
  }

  private notePosition(position: string | null): void {
    if (position !== null && /^[0-9]{1,18}$/.test(position)) {
      this.lastPosition = Math.max(this.lastPosition, Number(position));
    }
  }

  /** A typed request: the path template of the schema, its path parameters, query and body checked by tsc. */
  private async call<P extends ApiPath, M extends Method>(
    method: M,
    template: P,
    options: CallOptions<P, M> = {},
  ): Promise<Answer<P, M>> {
    const path = fillPath(template, options.path as Record<string, unknown> | undefined).slice(API_PREFIX.length);
    const answer = await this.request<Answer<P, M>>(method, path, {
      json: options.json,
      query: options.query as RequestOptions["query"],
      idempotencyKey: options.idempotencyKey,
    });
    return answer.body;
  }

  private url(path: string, query: RequestOptions["query"]): string {
    const url = new URL(this.baseUrl + API_PREFIX + path.replace(/^\/+/, "")); // keeps a base URL's own path
    for (const [name, value] of Object.entries(query ?? {})) {
      if (value !== undefined && value !== null) url.searchParams.set(name, String(value));
    }
    return url.toString();
  }

  /** `backoffMs` × 1, 2, 4 … or the server's `Retry-After` (seconds), at most `backoffMaxMs`. */
  private backoffDelay(attempt: number, retryAfter: string | null): number {
    if (retryAfter !== null && /^\d+$/.test(retryAfter)) return Math.min(Number(retryAfter) * 1000, this.backoffMaxMs);
    return Math.min(this.backoffMs * 2 ** attempt, this.backoffMaxMs);
  }

  /** Every result of a list endpoint, following `next_cursor` until it is null. */
  private async *pages<Row>(path: string, query: RequestOptions["query"]): AsyncGenerator<Row> {
    const parameters = { ...query };
    for (;;) {
      const { body } = await this.request<{ results: Row[]; next_cursor: string | number | null }>("GET", path, {
        query: parameters,
      });
      yield* body.results;
      if (body.next_cursor === null || body.results.length === 0) return;
      parameters.cursor = body.next_cursor;
    }
  }

  // --- goals and tasks -------------------------------------------------------------------------------------

  /**
   * A goal with its plan (`tasks`: `key`, `objective`, `depends_on` …). `fields`: `inputs`, `constraints`,
   * `success_criteria`, `risk` and, for an operator, `contracts`.
   */
  createGoal(
    objective: string,
    options: { tasks: PlannedTask[]; idempotencyKey?: string } & Omit<Partial<GoalPlan>, "objective" | "tasks">,
  ): Promise<Goal> {
    const { tasks, idempotencyKey, ...fields } = options;
    return this.call("post", "/api/v1/goals", { json: { objective, tasks, ...fields }, idempotencyKey });
  }

  goal(goalId: string): Promise<Answer<"/api/v1/goals/{goal_id}", "get">> {
    return this.call("get", "/api/v1/goals/{goal_id}", { path: { goal_id: goalId } });
  }

  task(taskId: string): Promise<Answer<"/api/v1/tasks/{task_id}", "get">> {
    return this.call("get", "/api/v1/tasks/{task_id}", { path: { task_id: taskId } });
  }

  /** The project's tasks, page after page, filtered by goal, state and key. */
  tasks(filters: { goalId?: string; state?: Task["state"]; key?: string; limit?: number } = {}): AsyncGenerator<Task> {
    const query = { goal: filters.goalId, state: filters.state, key: filters.key, limit: filters.limit ?? 50 };
    return this.pages<Task>("tasks", query);
  }

  private transition(command: "start" | "fail" | "block", taskId: string, options: TransitionOptions): Promise<Task> {
    return this.call("post", `/api/v1/tasks/{task_id}/${command}`, {
      path: { task_id: taskId },
      json: options,
    });
  }

  /** pending → running, or failed → running (a retry: the attempt rises). */
  start(taskId: string, options: TransitionOptions = {}): Promise<Task> {
    return this.transition("start", taskId, options);
  }

  fail(taskId: string, options: TransitionOptions = {}): Promise<Task> {
    return this.transition("fail", taskId, options);
  }

  block(taskId: string, options: TransitionOptions = {}): Promise<Task> {
    return this.transition("block", taskId, options);
  }

  // --- world state -----------------------------------------------------------------------------------------

  private record(noun: string, scope: Scope, body: Record<string, unknown>): Promise<Item> {
    if ((scope.taskId === undefined) === (scope.goalId === undefined)) {
      throw new TypeError("give taskId or goalId, exactly one");
    }
    const where = scope.taskId !== undefined ? `tasks/${scope.taskId}` : `goals/${scope.goalId}`;
    return this.request<Item>("POST", `${where}/${noun}`, { json: body }).then((answer) => answer.body);
  }

  recordFact(
    text: string,
    options: Scope & Optional<Omit<JsonBody<"/api/v1/tasks/{scope_id}/facts", "post">, "text">>,
  ): Promise<Item> {
    const { taskId, goalId, ...fields } = options;
    return this.record("facts", { taskId, goalId } as Scope, { text, ...fields });
  }

  recordDecision(
    text: string,
    options: Scope & Optional<Omit<JsonBody<"/api/v1/tasks/{scope_id}/decisions", "post">, "text">>,
  ): Promise<Item> {
    const { taskId, goalId, ...fields } = options;
    return this.record("decisions", { taskId, goalId } as Scope, { text, ...fields });
  }

  recordFailure(
    taskId: string,
    text: string,
    fields: Optional<Omit<JsonBody<"/api/v1/tasks/{scope_id}/failures", "post">, "text">> = {},
  ): Promise<Item> {
    return this.record("failures", { taskId }, { text, ...fields });
  }

  recordProgress(
    text: string,
    options: Scope & Optional<Omit<JsonBody<"/api/v1/tasks/{scope_id}/progress", "post">, "text">>,
  ): Promise<Item> {
    const { taskId, goalId, ...fields } = options;
    return this.record("progress", { taskId, goalId } as Scope, { text, ...fields });
  }

  /** A tool call the agent made; the server keeps only the arguments' digest. */
  recordToolCall(
    taskId: string,
    tool: string,
    resultSummary: string,
    fields: Optional<Omit<JsonBody<"/api/v1/tasks/{scope_id}/tool-calls", "post">, "tool" | "result_summary">> = {},
  ): Promise<Item> {
    return this.record("tool-calls", { taskId }, { tool, result_summary: resultSummary, ...fields });
  }

  /** An artifact; `content_text` or `content_base64` is stored by its sha256 on the server. */
  recordArtifact(
    summary: string,
    options: Scope & Optional<Omit<JsonBody<"/api/v1/tasks/{scope_id}/artifacts", "post">, "summary">>,
  ): Promise<Item> {
    const { taskId, goalId, ...fields } = options;
    return this.record("artifacts", { taskId, goalId } as Scope, { summary, ...fields });
  }

  /**
   * Retract a current fact (it stays in the history). A fact above the token's ceiling (an operator's, for an
   * agent token) throws `Forbidden` with `field === "trust_class"`; nothing is written.
   */
  retractFact(factId: string, fields: JsonBody<"/api/v1/facts/{fact_id}/retract", "post">): Promise<Item> {
    return this.call("post", "/api/v1/facts/{fact_id}/retract", { path: { fact_id: factId }, json: fields });
  }

  /** Replace a current fact by a new one in its scope; the new fact. Refused as `retractFact` is. */
  supersedeFact(
    factId: string,
    text: string,
    fields: Optional<Omit<JsonBody<"/api/v1/facts/{fact_id}/supersede", "post">, "text">> = {},
  ): Promise<Item> {
    return this.call("post", "/api/v1/facts/{fact_id}/supersede", {
      path: { fact_id: factId },
      json: { text, ...fields } as JsonBody<"/api/v1/facts/{fact_id}/supersede", "post">,
    });
  }

  // --- context ---------------------------------------------------------------------------------------------

  /** Resolve the task's context under its grants: the bundle, and the escalations it opened. */
  async resolve(
    taskId: string,
    fields: Optional<Omit<JsonBody<"/api/v1/tasks/{task_id}/resolve", "post">, "async">> = {},
  ): Promise<Extract<Resolution, { bundle: unknown }>> {
    const answer = await this.call("post", "/api/v1/tasks/{task_id}/resolve", {
      path: { task_id: taskId },
      json: fields as JsonBody<"/api/v1/tasks/{task_id}/resolve", "post">,
    });
    return answer as Extract<Resolution, { bundle: unknown }>;
  }

  /**
   * The task's context for one call of `model` (a catalog word): prompt block, tools, budget, what was left
   * out. `focus` says what the agent is working on now: it ranks the facts beside the step.
   */
  async compile(
    taskId: string,
    model: string,
    fields: Optional<Omit<CompileRequest, "model" | "async">> = {},
  ): Promise<CompiledAnswer> {
    const answer = await this.call("post", "/api/v1/tasks/{task_id}/compile", {
      path: { task_id: taskId },
      json: { model, ...fields } as CompileRequest,
    });
    const compiled = answer as Extract<typeof answer, { context: unknown }>;
    return { ...compiled.context, request_id: compiled.request_id };
  }

  context(digest: string): Promise<CompiledContext> {
    return this.call("get", "/api/v1/contexts/{digest}", { path: { digest } });
  }

  /** Every item and tool a compiled context left out, in order, fetched a page at a time. */
  excluded(
    digest: string,
    options: { limit?: number } = {},
  ): AsyncGenerator<Answer<"/api/v1/contexts/{digest}/excluded", "get">["results"][number]> {
    return this.pages(`contexts/${encodeURIComponent(digest)}/excluded`, { limit: options.limit ?? 500 });
  }

  // --- contracts and the gate ------------------------------------------------------------------------------

  /**
   * Register or replace the task's contract (an operator's token): the checks that alone decide whether the
   * task completes. Not while the task runs (409 `contract_frozen`); an executable off the allowlist is 422
   * `denied_executable`.
   */
  registerContract(
    taskId: string,
    contract: Contract,
    fields: Optional<Omit<JsonBody<"/api/v1/tasks/{task_id}/contract", "put">, "contract">> & {
      idempotencyKey?: string;
    } = {},
  ): Promise<RegisteredContract> {
    const { idempotencyKey, ...rest } = fields;
    return this.call("put", "/api/v1/tasks/{task_id}/contract", {
      path: { task_id: taskId },
      json: { contract, ...rest } as JsonBody<"/api/v1/tasks/{task_id}/contract", "put">,
      idempotencyKey,
    });
  }

  contract(taskId: string): Promise<Answer<"/api/v1/tasks/{task_id}/contract", "get">> {
    return this.call("get", "/api/v1/tasks/{task_id}/contract", { path: { task_id: taskId } });
  }

  /**
   * Ask the verification gate to complete a running task; its checks decide, the answer is recorded beside
   * them. With `wait` (the default) a pending request is polled until the gate decides (`CompletionTimeout`
   * after `timeoutMs`); a request already pending for this task version (409 `completion_pending`) is followed.
   */
  async complete(
    taskId: string,
    answer = "",
    options: { expected_version?: number; wait?: boolean; timeoutMs?: number; pollIntervalMs?: number } = {},
  ): Promise<GateDecision> {
    const wait = options.wait ?? true;
    let result: CompletionResult;
    try {
      result = await this.call("post", "/api/v1/tasks/{task_id}/complete", {
        path: { task_id: taskId },
        json: { answer, expected_version: options.expected_version },
      });
    } catch (error) {
      const pending = error instanceof Conflict && error.code === "completion_pending" ? error.details.request_id : null;
      if (!wait || typeof pending !== "string") throw error;
      return this.waitForCompletion(pending, options);
    }
    const decision = decisionOf(result);
    if (DECIDED_OUTCOMES.has(decision.outcome) || !wait || decision.request_id === null) return decision;
    return this.waitForCompletion(decision.request_id, options);
  }

  async completion(requestId: string): Promise<GateDecision> {
    const completion = await this.call("get", "/api/v1/completions/{request_id}", { path: { request_id: requestId } });
    return decisionOfCompletion(completion);
  }

  /** Poll a completion request until the gate decides it. */
  async waitForCompletion(
    requestId: string,
    options: { timeoutMs?: number; pollIntervalMs?: number } = {},
  ): Promise<GateDecision> {
    const timeoutMs = options.timeoutMs ?? 600_000;
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const decision = await this.completion(requestId);
      if (DECIDED_OUTCOMES.has(decision.outcome)) return decision;
      if (Date.now() >= deadline) {
        throw new CompletionTimeout(`completion ${requestId} still pending after ${Math.round(timeoutMs / 1000)} s`, {
          code: "completion_timeout",
          details: { request_id: requestId },
        });
      }
      await this.sleep(options.pollIntervalMs ?? 500);
    }
  }

  // --- the event feed and the stream -----------------------------------------------------------------------

  /**
   * The project's events in log order after `cursor` (a log position; none: from the start), page after page.
   * With `follow` it then polls for new ones every `pollIntervalMs` until `idleTimeoutMs` passes without one.
   */
  async *events(
    options: { cursor?: number; limit?: number; follow?: boolean; pollIntervalMs?: number; idleTimeoutMs?: number } = {},
  ): AsyncGenerator<StoredEvent> {
    let position = options.cursor;
    let idleSince = Date.now();
    for (;;) {
      const page = await this.call("get", "/api/v1/events", { query: { cursor: position, limit: options.limit ?? 100 } });
      for (const event of page.results) {
        yield event;
        position = event.position;
      }
      if (page.results.length > 0) idleSince = Date.now();
      if (page.next_cursor !== null && page.results.length > 0) continue;
      if (!options.follow) return;
      if (options.idleTimeoutMs !== undefined && Date.now() - idleSince >= options.idleTimeoutMs) return;
      await this.sleep(options.pollIntervalMs ?? 1000);
    }
  }

  /**
   * The project's events pushed as Server-Sent Events (`GET /events/stream`) over `fetch`, so the bearer token
   * goes in a header. A connection ends after the server's timeout, or drops; the stream then reconnects with
   * `Last-Event-ID` (the last id received) and goes on after it: every event arrives once, in order. Stop it
   * by leaving the `for await` loop or aborting `signal`. A connection refused (429 `too_many_streams`, 503),
   * failed or dropped is tried again `retries` times in a row (waiting the server's `Retry-After`), then
   * thrown; any other refusal is thrown at once, a revoked token (401, or the stream's `event: error`
   * `authentication_failed`) as `Unauthorized`.
   */
  async *eventStream(options: EventStreamOptions = {}): AsyncGenerator<StreamEvent> {
    let lastId = options.lastEventId ?? null;
    let reconnectMs = options.reconnectDelayMs ?? DEFAULT_RECONNECT_MS;
    let failures = 0;
    while (!options.signal?.aborted) {
      const connection = this.streamConnection(lastId, options);
      let end: ConnectionEnd;
      try {
        for (;;) {
          const step = await connection.next();
          if (step.done) {
            end = step.value;
            break;
          }
          lastId = step.value.id;
          failures = 0;
          yield step.value;
        }
      } finally {
        await connection.return({ kind: "aborted", retryMs: null }); // a `break` out of the caller's loop closes the connection
      }
      if (end.retryMs !== null && options.reconnectDelayMs === undefined) reconnectMs = end.retryMs;
      if (end.kind === "aborted") return;
      if (end.kind === "failed") {
        failures += 1;
        if (failures > this.retries) throw end.error;
        await this.pause(this.backoffDelay(failures - 1, end.retryAfter), options.signal);
        continue;
      }
      if (options.reconnect === false) return;
      await this.pause(reconnectMs, options.signal);
    }
  }

  /** One connection of the event stream: its events, then how it ended. */
  private async *streamConnection(
    lastId: number | null,
    options: EventStreamOptions,
  ): AsyncGenerator<StreamEvent, ConnectionEnd> {
    const connection = new AbortController();
    const stop = (): void => connection.abort();
    options.signal?.addEventListener("abort", stop, { once: true });
    let retryMs: number | null = null;
    try {
      const headers: Record<string, string> = { Authorization: `Bearer ${this.token}`, Accept: "text/event-stream" };
      if (lastId !== null) headers["Last-Event-ID"] = String(lastId);
      const query = { after: lastId === null ? options.after : undefined, timeout: options.timeoutS };
      let response: Response;
      try {
        response = await this.fetchImpl(this.url("events/stream", query), { headers, signal: connection.signal });
      } catch (error) {
        if (options.signal?.aborted) return { kind: "aborted", retryMs };
        return { kind: "failed", error: streamFailure("no answer", error), retryAfter: null, retryMs };
      }
      if (response.status !== 200) {
        const text = await response.text().catch(() => "");
        const error = errorFromAnswer(response.status, safeJson(text), response.headers.get("X-Request-ID"));
        if (!RETRY_STATUSES.has(response.status)) throw error;
        return { kind: "failed", error, retryAfter: response.headers.get("Retry-After"), retryMs };
      }
      let refusal: NexumError | null = null;
      try {
        for await (const item of sseItems(response.body ?? new ReadableStream<Uint8Array>())) {
          if (item.kind === "retry") {
            retryMs = item.retryMs;
            continue;
          }
          const { message } = item;
          if (message.event === "error") {
            refusal = streamError(safeJson(message.data));
            break;
          }
          const event = safeJson(message.data) as StoredEvent;
          yield { id: Number(message.id ?? event.position), type: message.event, event };
        }
      } catch (error) {
        if (options.signal?.aborted) return { kind: "aborted", retryMs };
        return { kind: "failed", error: streamFailure("dropped", error), retryAfter: null, retryMs };
      }
      if (refusal instanceof Unauthorized) throw refusal;
      if (refusal !== null) return { kind: "failed", error: refusal, retryAfter: null, retryMs };
      return { kind: "closed", retryMs };
    } finally {
      options.signal?.removeEventListener("abort", stop);
      connection.abort();
    }
  }

  /** Waits `ms`, or less when `signal` aborts first. */
  private async pause(ms: number, signal: AbortSignal | undefined): Promise<void> {
    if (signal === undefined) return this.sleep(ms);
    if (signal.aborted) return;
    let stop: () => void = () => undefined;
    const aborted = new Promise<void>((resolve) => {
      stop = resolve;
      signal.addEventListener("abort", stop, { once: true });
    });
    await Promise.race([this.sleep(ms), aborted]);
    signal.removeEventListener("abort", stop);
  }
}

/** How one connection of the event stream ended (`retryMs`: what the server announced on it, if anything). */
type ConnectionEnd =
  | { kind: "closed"; retryMs: number | null }
  | { kind: "aborted"; retryMs: number | null }
  | { kind: "failed"; error: NexumError; retryAfter: string | null; retryMs: number | null };

function streamFailure(what: string, error: unknown): ConnectionFailed {
  return new ConnectionFailed(`GET events/stream: ${what}: ${describe(error)}`, { code: "connection_failed", cause: error });
}

/** The stream's `event: error` message (the one error shape): a revoked token is `Unauthorized`. */
function streamError(body: unknown): NexumError {
  const error = errorFromAnswer(503, body);
  if (error.code !== "authentication_failed") return error;
  return new Unauthorized(error.message, { code: error.code, status: 401, requestId: error.requestId });
}

function safeJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return null;
  }
}

function decisionOfCompletion(completion: Completion): GateDecision {
  return {
    outcome: completion.outcome,
    reason: completion.reason,
    task_id: completion.task_id,
    request_id: completion.request_id,
    failing_checks: completion.failing_checks,
    check_runs: completion.check_runs,
    completion,
  };
}

/** From the answer of `POST /tasks/{id}/complete`: `{outcome, reason, task, completion, poll}`. */
function decisionOf(result: CompletionResult): GateDecision {
  if (result.completion !== null) {
    return { ...decisionOfCompletion(result.completion), outcome: result.outcome, reason: result.reason };
  }
  return {
    outcome: result.outcome,
    reason: result.reason,
    task_id: result.task.id,
    request_id: null,
    failing_checks: [],
    check_runs: [],
    completion: null,
  };
}
