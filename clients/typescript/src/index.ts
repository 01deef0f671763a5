export { Nexum } from "./client.js";
export type {
  ApiAnswer,
  EventStreamOptions,
  GateDecision,
  NexumOptions,
  RequestOptions,
  Scope,
  StreamEvent,
  TransitionOptions,
} from "./client.js";
export {
  BadRequest,
  CompletionTimeout,
  Conflict,
  ConnectionFailed,
  Forbidden,
  NexumError,
  NotFound,
  Refused,
  ServerError,
  TooLarge,
  TooManyRequests,
  Unauthorized,
  Unavailable,
  errorFromAnswer,
} from "./errors.js";
export type { ErrorDetail, NexumErrorInit } from "./errors.js";
export { SseParser, sseItems } from "./sse.js";
export type { SseItem, SseMessage } from "./sse.js";
export type * from "./types.js";
export type { components, paths } from "./schema.js";
