/**
 * Server-Sent Events parsed from a byte stream, as the WHATWG `EventSource` parses them (lines ended by CRLF,
 * LF or CR; `field: value`; `data` lines joined by newlines; a blank line dispatches; `:` starts a comment),
 * so that a `fetch` body can be followed with headers an `EventSource` cannot send (the bearer token).
 */

/** One message of an event stream. `id` is the last id the stream set (carried over, as EventSource does). */
export interface SseMessage {
  id: string | null;
  event: string;
  data: string;
}

/** What the parser hands on: a message, or a `retry:` the server announced (milliseconds). */
export type SseItem = { kind: "message"; message: SseMessage } | { kind: "retry"; retryMs: number };

/** Parses chunks of text as they arrive; `push` returns what each chunk completed. */
export class SseParser {
  private buffer = "";
  private lastId: string | null = null;
  private eventType = "";
  private data: string[] = [];
  private pendingCr = false;

  push(chunk: string): SseItem[] {
    let text = chunk;
    if (this.pendingCr && text.startsWith("\n")) text = text.slice(1); // the LF of a CRLF split across chunks
    this.pendingCr = false;
    this.buffer += text;
    const items: SseItem[] = [];
    for (;;) {
      const end = this.buffer.search(/[\r\n]/);
      if (end === -1) break;
      const line = this.buffer.slice(0, end);
      if (this.buffer[end] === "\r") {
        if (end + 1 === this.buffer.length) this.pendingCr = true;
        this.buffer = this.buffer.slice(this.buffer[end + 1] === "\n" ? end + 2 : end + 1);
      } else {
        this.buffer = this.buffer.slice(end + 1);
      }
      const item = this.line(line);
      if (item !== null) items.push(item);
    }
    return items;
  }

  private line(line: string): SseItem | null {
    if (line === "") return this.dispatch();
    if (line.startsWith(":")) return null;
    const colon = line.indexOf(":");
    const field = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    switch (field) {
      case "event":
        this.eventType = value;
        break;
      case "data":
        this.data.push(value);
        break;
      case "id":
        if (!value.includes("\0")) this.lastId = value;
        break;
      case "retry":
        if (/^\d+$/.test(value)) return { kind: "retry", retryMs: Number(value) };
        break;
      default: // an unknown field is ignored, as the standard says
    }
    return null;
  }

  private dispatch(): SseItem | null {
    const data = this.data;
    const event = this.eventType || "message";
    this.data = [];
    this.eventType = "";
    if (data.length === 0) return null;
    return { kind: "message", message: { id: this.lastId, event, data: data.join("\n") } };
  }
}

/** The messages of a response body, in order; a message cut off by the end of the body is dropped. */
export async function* sseItems(body: ReadableStream<Uint8Array>): AsyncGenerator<SseItem> {
  const parser = new SseParser();
  const decoder = new TextDecoder();
  const reader = body.getReader();
  let finished = false;
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      yield* parser.push(decoder.decode(value, { stream: true }));
    }
    finished = true;
    yield* parser.push(decoder.decode());
  } finally {
    if (!finished) await reader.cancel().catch(() => undefined); // the reader left early: close the body
  }
}
