/**
 * Types read off the generated OpenAPI schema (`schema.ts`, `npm run generate`) by path and method, never by
 * operationId or component name: a renamed operation or schema changes nothing here, a changed body or
 * answer changes the type of the method that sends or returns it, and the build says where.
 */

import type { components, paths } from "./schema.js";

export type Schemas = components["schemas"];
export type ApiPath = keyof paths;
export type Method = "get" | "put" | "post" | "delete" | "patch";

type Operation<P extends ApiPath, M extends Method> = Exclude<paths[P][M], undefined>;

/** The JSON body an operation takes (`undefined` when it takes none). */
export type JsonBody<P extends ApiPath, M extends Method> =
  Operation<P, M> extends { requestBody?: { content: { "application/json": infer Body } } } ? Body : undefined;

/** The query parameters an operation declares. */
export type Query<P extends ApiPath, M extends Method> =
  Operation<P, M> extends { parameters: { query?: infer Parameters } } ? Parameters : never;

/** The path parameters of an operation (`{task_id: string}` for `/api/v1/tasks/{task_id}`). */
export type PathParameters<P extends ApiPath, M extends Method> =
  Operation<P, M> extends { parameters: { path: infer Parameters } } ? Parameters : never;

type SuccessStatus = 200 | 201 | 202;
type JsonOf<Response> = Response extends { content: { "application/json": infer Body } } ? Body : undefined;

/** The JSON answer of an operation's successful statuses (200, 201, 202), as a union. */
export type Answer<P extends ApiPath, M extends Method> =
  Operation<P, M> extends { responses: infer Responses }
    ? { [Status in keyof Responses & SuccessStatus]: JsonOf<Responses[Status]> }[keyof Responses & SuccessStatus]
    : never;

/** The members of an object type, each also accepting `undefined` (a member left out of the body). */
export type Optional<T> = { [Key in keyof T]?: T[Key] | undefined };

export type Task = Schemas["Task"];
export type Goal = Answer<"/api/v1/goals", "post">;
export type GoalPlan = JsonBody<"/api/v1/goals", "post">;
export type PlannedTask = GoalPlan["tasks"][number];
export type Item = Answer<"/api/v1/tasks/{scope_id}/facts", "post">;
export type Resolution = Answer<"/api/v1/tasks/{task_id}/resolve", "post">;
export type CompileRequest = JsonBody<"/api/v1/tasks/{task_id}/compile", "post">;
export type CompiledContext = Schemas["CompiledContext"];
/** A compile's context with the compile's `request_id` (what `GET /compiles/{request_id}` reads). */
export type CompiledAnswer = CompiledContext & { request_id: string };
export type Contract = JsonBody<"/api/v1/tasks/{task_id}/contract", "put">["contract"];
export type Check = NonNullable<Contract["checks"]>[number];
export type RegisteredContract = Answer<"/api/v1/tasks/{task_id}/contract", "put">;
export type CompletionResult = Answer<"/api/v1/tasks/{task_id}/complete", "post">;
export type Completion = Answer<"/api/v1/completions/{request_id}", "get">;
export type StoredEvent = Schemas["StoredEvent"];
