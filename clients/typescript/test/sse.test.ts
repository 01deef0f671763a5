/** The SSE parser, fed the way a network delivers bytes: split anywhere, CRLF or LF or CR line ends. */

import assert from "node:assert/strict";
import { test } from "node:test";

import { SseParser, sseItems, type SseItem } from "../src/sse.js";

function parseAll(chunks: string[]): SseItem[] {
  const parser = new SseParser();
  return chunks.flatMap((chunk) => parser.push(chunk));
}

test("messages, a retry and comments, whatever the line ends", () => {
  const text = "retry: 1000\r\n\r\n: keep-alive\r\nid: 7\r\nevent: FactRecorded\r\ndata: {\"a\":1}\r\n\r\nid: 8\rdata: x\r\r";
  assert.deepEqual(parseAll([text]), [
    { kind: "retry", retryMs: 1000 },
    { kind: "message", message: { id: "7", event: "FactRecorded", data: '{"a":1}' } },
    { kind: "message", message: { id: "8", event: "message", data: "x" } },
  ]);
});

test("a message split at every character parses as the whole", () => {
  const text = "id: 41\r\nevent: TaskStarted\r\ndata: line one\r\ndata:line two\r\n\r\n";
  const whole = parseAll([text]);
  assert.deepEqual(parseAll([...text]), whole);
  assert.deepEqual(whole, [{ kind: "message", message: { id: "41", event: "TaskStarted", data: "line one\nline two" } }]);
});

test("the last id carries over to a message without one; a bad retry and unknown fields are ignored", () => {
  const items = parseAll(["id: 3\ndata: a\n\ndata: b\nretry: soon\ncolour: red\n\n"]);
  assert.deepEqual(items, [
    { kind: "message", message: { id: "3", event: "message", data: "a" } },
    { kind: "message", message: { id: "3", event: "message", data: "b" } },
  ]);
});

test("a body that ends inside a message drops that message", async () => {
  const bytes = new TextEncoder().encode("id: 1\ndata: whole\n\nid: 2\ndata: cut");
  const body = new ReadableStream<Uint8Array>({
    start(controller) {
      controller.enqueue(bytes.slice(0, 9));
      controller.enqueue(bytes.slice(9));
      controller.close();
    },
  });
  const items: SseItem[] = [];
  for await (const item of sseItems(body)) items.push(item);
  assert.deepEqual(items, [{ kind: "message", message: { id: "1", event: "message", data: "whole" } }]);
});
