/**
 * Typed errors: every error answer of the server, `{"error": {code, message, field, details, request_id}}`,
 * is thrown as a `NexumError` subclass chosen by its HTTP status, carrying those members and the status.
 * No answer at all is `ConnectionFailed`.
 */

import type { components } from "./schema.js";

/** The error object the API answers with (the schema's `ErrorDetail`). */
export type ErrorDetail = components["schemas"]["ErrorDetail"];

export interface NexumErrorInit {
  code: string;
  status?: number | null;
  field?: string | null;
  details?: Record<string, unknown>;
  requestId?: string | null;
  cause?: unknown;
}

/** An error answer of the server (or, for `ConnectionFailed` and `CompletionTimeout`, none). */
export class NexumError extends Error {
  readonly code: string;
  /** The HTTP status; null when no answer came. */
  readonly status: number | null;
  /** The input at fault (`colour`, `contract.checks[0].argv`, `Last-Event-ID`), if one is. */
  readonly field: string | null;
  readonly details: Record<string, unknown>;
  /** The `X-Request-ID` the server logged the request under. */
  readonly requestId: string | null;

  constructor(message: string, init: NexumErrorInit) {
    super(message, init.cause === undefined ? undefined : { cause: init.cause });
    this.name = new.target.name;
    this.code = init.code;
    this.status = init.status ?? null;
    this.field = init.field ?? null;
    this.details = init.details ?? {};
    this.requestId = init.requestId ?? null;
  }

  override toString(): string {
    const where = this.field ? ` (field ${this.field})` : "";
    const request = this.requestId ? ` [request ${this.requestId}]` : "";
    return `${this.name}: ${this.code}: ${this.message}${where}${request}`;
  }
}

/** 400: bad input (`unknown_field`, `invalid` …); `field` names the member at fault. */
export class BadRequest extends NexumError {}
/** 401: no token, or a token the server does not know (or revoked). */
export class Unauthorized extends NexumError {}
/** 403: the token's role may not do this, or a trust claim above its ceiling. */
export class Forbidden extends NexumError {}
/** 404: no such object in the token's project. */
export class NotFound extends NexumError {}
/** 409: an illegal transition, a stale `expected_version`, an `Idempotency-Key` reused for another request … */
export class Conflict extends NexumError {}
/** 413: a body or an artifact over the server's limit. */
export class TooLarge extends NexumError {}
/** 422: refused by policy (`denied_executable`, `untrusted_content`, `workspace_violation` …). */
export class Refused extends NexumError {}
/** 429: too many open at once for this token (event streams); retried before thrown. */
export class TooManyRequests extends NexumError {}
/** 503 (or 502/504 from a proxy): the server or what it depends on is down; retried before thrown. */
export class Unavailable extends NexumError {}
/** 500 or another status the server should never answer; `requestId` finds it in the server's log. */
export class ServerError extends NexumError {}
/** No answer: the connection failed, was dropped or timed out, on every attempt. */
export class ConnectionFailed extends NexumError {}
/** `complete()` polled past its deadline before the gate decided; `details.request_id` is the request to poll. */
export class CompletionTimeout extends NexumError {}

const ERRORS_BY_STATUS: Record<number, typeof NexumError> = {
  400: BadRequest,
  401: Unauthorized,
  403: Forbidden,
  404: NotFound,
  409: Conflict,
  413: TooLarge,
  422: Refused,
  429: TooManyRequests,
  502: Unavailable,
  503: Unavailable,
  504: Unavailable,
};

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** The typed error for an error answer; a body not in the one error shape (a proxy's page) still gives one. */
export function errorFromAnswer(status: number, body: unknown, fallbackRequestId: string | null = null): NexumError {
  const error = isRecord(body) && isRecord(body.error) ? body.error : {};
  const ErrorClass = ERRORS_BY_STATUS[status] ?? ServerError;
  const text = (value: unknown): string | null => (typeof value === "string" && value !== "" ? value : null);
  return new ErrorClass(text(error.message) ?? `HTTP ${status}`, {
    code: text(error.code) ?? `http_${status}`,
    status,
    field: text(error.field),
    details: isRecord(error.details) ? error.details : {},
    requestId: text(error.request_id) ?? fallbackRequestId,
  });
}
