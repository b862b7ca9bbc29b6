/**
 * A deliberately small HTTP/1.1 server for the health endpoint, over `Deno.listen`.
 *
 * Why not `Deno.serve`: a PID 1 must bound what clients can cost it, and `Deno.serve` has no
 * limit on connections, header size or header read time. Here every connection has a fixed
 * buffer, a deadline, and a place among at most `maxConnections`; at the limit the least
 * recently active connection is closed, so that a flood cannot starve the kubelet's probes.
 * Requests with a body are answered and the connection closed (nothing here takes a body).
 */

/** A parsed request: only what the health routes need. */
export interface HttpRequest {
  readonly method: string;
  readonly path: string;
}

/** A response to write: status, extra headers and body (omitted on the wire for HEAD). */
export interface HttpResponse {
  readonly status: number;
  readonly headers?: Readonly<Record<string, string>>;
  readonly contentType?: string;
  readonly body: string;
}

/** Limits of the server. */
export interface HttpLimits {
  /** Connections held at once; at the limit the least recently active one is dropped. */
  readonly maxConnections: number;
  /** Bytes of request line plus headers. */
  readonly maxHeaderBytes: number;
  /** A complete request must arrive within this long after connecting or the last response. */
  readonly requestTimeoutMs: number;
  /** A response must be taken by the client within this long (else it is cut off). */
  readonly writeTimeoutMs: number;
}

/** Defaults: room for a load test at 50 connections and for probes beside it. */
export const DEFAULT_LIMITS: HttpLimits = Object.freeze({
  maxConnections: 256,
  maxHeaderBytes: 8192,
  requestTimeoutMs: 5000,
  writeTimeoutMs: 2000,
});

import type { Endpoints } from "../sys/sockets.ts";

/** A connection's deadlines. */
interface Connection {
  /** The next complete request must have arrived by then (performance.now() ms). */
  deadline: number;
  /** Since when a response is being written; null while reading. */
  writingSince: number | null;
  /** When it was cut off (closed, its socket shut down if a write was stuck); null: live. */
  abortedAt: number | null;
}

const REASONS: Readonly<Record<number, string>> = {
  200: "OK",
  400: "Bad Request",
  404: "Not Found",
  405: "Method Not Allowed",
  431: "Request Header Fields Too Large",
  500: "Internal Server Error",
  503: "Service Unavailable",
};

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** What the response says in its Connection header: nothing, or close, or keep-alive. */
export type ConnectionHeader = "close" | "keep-alive" | null;

const VARIANTS: readonly ConnectionHeader[] = [null, "close", "keep-alive"];

// Constant responses (the same frozen object each time) are encoded once per variant.
const encoded = new WeakMap<HttpResponse, Array<Uint8Array | undefined>>();

function encodeCached(response: HttpResponse, head: boolean, connection: ConnectionHeader) {
  if (!Object.isFrozen(response)) return encodeResponse(response, head, connection);
  let variants = encoded.get(response);
  if (variants === undefined) encoded.set(response, variants = []);
  const index = (head ? VARIANTS.length : 0) + VARIANTS.indexOf(connection);
  return variants[index] ??= encodeResponse(response, head, connection);
}

/** Serialises a response; exported for tests. */
export function encodeResponse(
  response: HttpResponse,
  head: boolean,
  connection: ConnectionHeader,
): Uint8Array {
  const body = encoder.encode(response.body);
  const lines = [
    `HTTP/1.1 ${response.status} ${REASONS[response.status] ?? "Unknown"}`,
    `content-type: ${response.contentType ?? "text/plain; charset=utf-8"}`,
    `content-length: ${body.length}`,
    "cache-control: no-store",
    ...Object.entries(response.headers ?? {}).map(([name, value]) => `${name}: ${value}`),
    ...(connection === null ? [] : [`connection: ${connection}`]),
  ];
  const header = encoder.encode(`${lines.join("\r\n")}\r\n\r\n`);
  if (head) return header;
  const out = new Uint8Array(header.length + body.length);
  out.set(header);
  out.set(body, header.length);
  return out;
}

/**
 * The end of a request head in `buffer[from, to)`: the index after the empty line that ends
 * it, CRLF or bare LF (RFC 9112 section 2.2 lets a server accept LF alone); -1 if not there yet.
 * Linear: each byte is looked at once.
 */
export function findHeadEnd(buffer: Uint8Array, from: number, to: number): number {
  for (let i = Math.max(from, 1); i < to; i++) {
    if (buffer[i] !== 10) continue;
    if (buffer[i - 1] === 10) return i + 1; // LF LF
    if (buffer[i - 1] === 13 && i >= 2 && buffer[i - 2] === 10) return i + 1; // LF CR LF
  }
  return -1;
}

/** A head without the line ends of its final empty line. */
function withoutEmptyLine(head: Uint8Array): Uint8Array {
  let end = head.length;
  while (end > 0 && (head[end - 1] === 10 || head[end - 1] === 13)) end--;
  return head.subarray(0, end);
}

type Parsed =
  | { kind: "request"; request: HttpRequest; close: boolean; connection: ConnectionHeader }
  | { kind: "bad"; status: number };

const BAD: Parsed = Object.freeze({ kind: "bad", status: 400 });

function isTokenChar(code: number): boolean {
  // RFC 9110 tchar: ALPHA DIGIT ! # $ % & ' * + - . ^ _ ` | ~
  return (code >= 0x30 && code <= 0x39) || (code >= 0x41 && code <= 0x5a) ||
    (code >= 0x61 && code <= 0x7a) || "!#$%&'*+-.^_`|~".includes(String.fromCharCode(code));
}

function isBlank(char: string | undefined): boolean {
  return char === " " || char === "\t";
}

/** Trims spaces and tabs without a regular expression (a backtracking trim is quadratic). */
function trimBlanks(text: string): string {
  let start = 0;
  let end = text.length;
  while (start < end && isBlank(text[start])) start++;
  while (end > start && isBlank(text[end - 1])) end--;
  return text.slice(start, end);
}

/** True when every character is visible ASCII (no controls, spaces or DEL). */
function isVisible(text: string): boolean {
  for (let i = 0; i < text.length; i++) {
    const code = text.charCodeAt(i);
    if (code <= 0x20 || code >= 0x7f) return false;
  }
  return true;
}

function parseRequestLine(line: string): { method: string; target: string; minor: string } | null {
  const first = line.indexOf(" ");
  const second = line.indexOf(" ", first + 1);
  if (first < 1 || first > 16 || second < 0 || line.indexOf(" ", second + 1) >= 0) return null;
  const method = line.slice(0, first);
  const target = line.slice(first + 1, second);
  const version = line.slice(second + 1);
  for (let i = 0; i < method.length; i++) {
    const code = method.charCodeAt(i);
    if (code < 0x41 || code > 0x5a) return null; // A-Z
  }
  if (target.length === 0 || target.length > 2048 || !isVisible(target)) return null;
  if (version !== "HTTP/1.1" && version !== "HTTP/1.0") return null;
  return { method, target, minor: version.slice(-1) };
}

/**
 * Parses a request head (request line and headers, without the empty line); exported for
 * tests. Linear in the head's length: no regular expression with backtracking is involved.
 */
export function parseHead(text: string): Parsed {
  const lines = text.split("\n").map((line) => line.endsWith("\r") ? line.slice(0, -1) : line);
  const line = parseRequestLine(lines[0] ?? "");
  if (line === null) return BAD;
  const tokens = new Set<string>();
  let body = false;
  for (const raw of lines.slice(1)) {
    const colon = raw.indexOf(":");
    if (colon < 1) return BAD;
    for (let i = 0; i < colon; i++) if (!isTokenChar(raw.charCodeAt(i))) return BAD;
    const name = raw.slice(0, colon).toLowerCase();
    const value = trimBlanks(raw.slice(colon + 1)).toLowerCase();
    if (name === "connection") {
      for (const token of value.split(",")) tokens.add(trimBlanks(token));
    }
    // Nothing here reads a body: answer, then close rather than misread it as a next request.
    if (name === "transfer-encoding" || (name === "content-length" && value !== "0")) body = true;
  }
  // RFC 9112 section 9.3: "close" wins; HTTP/1.0 stays open only when it asks for keep-alive,
  // and then the answer says keep-alive too (1.0 clients close otherwise).
  const http10 = line.minor === "0";
  const close = body || tokens.has("close") || (http10 && !tokens.has("keep-alive"));
  const connection: ConnectionHeader = close ? "close" : http10 ? "keep-alive" : null;
  const target = line.target;
  const pathStart = target.startsWith("/") ? 0 : target.indexOf("/", target.indexOf("//") + 2);
  if (pathStart < 0 || !(target.startsWith("/") || /^https?:\/\//.test(target))) return BAD;
  const path = target.slice(pathStart).split("?")[0] ?? "/";
  return { kind: "request", request: { method: line.method, path }, close, connection };
}

/** The listening server; `close()` drops the listener and every connection at once. */
export class HttpServer {
  readonly #listener: Deno.TcpListener;
  readonly #handler: (request: HttpRequest) => HttpResponse;
  readonly #limits: HttpLimits;
  /**
   * Every connection until its descriptor is gone: a connection that was cut off stays here
   * (and counts against the limit) until its read or write has settled.
   */
  readonly #connections = new Map<Deno.Conn, Connection>();
  readonly #sweeper: ReturnType<typeof setInterval>;
  /** Cut-off connections whose write is stuck: shut down together, with one read of /proc. */
  #stuck: Array<{ conn: Deno.Conn; ends: Endpoints }> = [];
  #shutdownScheduled = false;
  /** Resolved when a connection's descriptor is gone (the accept loop waits at the cap). */
  #released = Promise.withResolvers<void>();
  #closed = false;

  /** Binds at once (throws Deno.errors.AddrInUse and the like); serving starts on the loop. */
  constructor(
    address: { hostname: string; port: number },
    handler: (request: HttpRequest) => HttpResponse,
    limits: HttpLimits = DEFAULT_LIMITS,
  ) {
    this.#listener = Deno.listen({ hostname: address.hostname, port: address.port });
    this.#handler = handler;
    this.#limits = limits;
    // One timer for all deadlines: a timer per request would cost more than the request.
    const shortest = Math.min(limits.requestTimeoutMs, limits.writeTimeoutMs);
    this.#sweeper = setInterval(() => this.#sweep(), Math.max(10, Math.min(1000, shortest / 4)));
    void this.#acceptLoop();
  }

  #sweep(): void {
    const now = performance.now();
    for (const [conn, state] of this.#connections) {
      if (state.abortedAt !== null) {
        // Cut off, but its read or write has not settled: look again whether its socket is
        // still open (a write can stay pending after its socket was closed).
        if (now - state.abortedAt > 250) this.#shutDown(conn);
        continue;
      }
      const late = state.writingSince === null
        ? now > state.deadline
        : now - state.writingSince > this.#limits.writeTimeoutMs;
      if (late) this.#abort(conn, state);
    }
  }

  /** The bound address (useful with port 0). */
  get address(): Deno.NetAddr {
    return this.#listener.addr;
  }

  /** Connections held now, those being cut off included. */
  get connectionCount(): number {
    return this.#connections.size;
  }

  /** Stops listening and closes every connection; synchronous. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    clearInterval(this.#sweeper);
    this.#listener.close();
    for (const [conn, state] of this.#connections) this.#abort(conn, state);
    this.#released.resolve();
  }

  async #acceptLoop(): Promise<void> {
    let failures = 0;
    while (!this.#closed) {
      // At the cap, room first: the quietest connection is cut off, and the next client
      // waits in the kernel's backlog until a descriptor is gone (cut off or not, a
      // connection counts until its read or write has settled).
      while (this.#connections.size >= this.#limits.maxConnections && !this.#closed) {
        if (this.#live() === this.#connections.size) this.#dropLeastRecent();
        await this.#released.promise;
      }
      let conn: Deno.Conn;
      try {
        conn = await this.#listener.accept();
        failures = 0;
      } catch (err: unknown) {
        if (this.#closed || err instanceof Deno.errors.BadResource) return;
        // Out of descriptors (EMFILE, ENFILE): give the connections we have a moment to end.
        // Anything else (a client reset before accept: ENOTCONN) concerns that one client.
        const exhausted = err instanceof Error && /os error 2[34]\b/.test(err.message);
        if (exhausted || ++failures > 100) {
          failures = 0;
          await new Promise((resolve) => setTimeout(resolve, 10));
        }
        continue;
      }
      const state: Connection = {
        deadline: performance.now() + this.#limits.requestTimeoutMs,
        writingSince: null,
        abortedAt: null,
      };
      this.#connections.set(conn, state);
      void this.#serve(conn, state);
    }
  }

  /** Connections not cut off. */
  #live(): number {
    let live = 0;
    for (const state of this.#connections.values()) if (state.abortedAt === null) live++;
    return live;
  }

  #dropLeastRecent(): void {
    // The earliest deadline belongs to the connection that has been quiet the longest.
    let oldest: [Deno.Conn, Connection] | null = null;
    for (const entry of this.#connections) {
      if (entry[1].abortedAt !== null) continue;
      if (oldest === null || entry[1].deadline < oldest[1].deadline) oldest = entry;
    }
    if (oldest !== null) this.#abort(...oldest);
  }

  /** Cuts a connection off: closes it, and shuts its socket down if a write is stuck. */
  #abort(conn: Deno.Conn, state: Connection): void {
    if (state.abortedAt !== null) return;
    state.abortedAt = performance.now();
    const stuck = state.writingSince !== null;
    try {
      conn.close();
    } catch {
      // Already closed by the peer's reset: nothing left to release.
    }
    // close() does not release a socket whose write is pending: shutdown(2) makes it fail.
    if (stuck) this.#shutDown(conn);
  }

  /**
   * Shuts a cut-off connection's socket down if its descriptor is still open, or forgets the
   * connection if it is gone; batched, since each batch reads /proc once.
   */
  #shutDown(conn: Deno.Conn): void {
    const ends = { local: conn.localAddr as Deno.NetAddr, remote: conn.remoteAddr as Deno.NetAddr };
    this.#stuck.push({ conn, ends });
    if (this.#shutdownScheduled) return;
    this.#shutdownScheduled = true;
    // Loaded on the first stuck write only; every abort of this turn goes in one batch.
    void import("../sys/sockets.ts").then((sockets) => {
      const batch = this.#stuck;
      this.#stuck = [];
      this.#shutdownScheduled = false;
      const stillOpen = sockets.shutdownConnections(batch.map((item) => item.ends));
      batch.forEach((item, i) => {
        if (stillOpen[i] === false) this.#forget(item.conn); // its descriptor is gone already
      });
    });
  }

  /** Takes a connection off the table: its descriptor is gone. */
  #forget(conn: Deno.Conn): void {
    if (!this.#connections.delete(conn)) return;
    this.#released.resolve();
    this.#released = Promise.withResolvers<void>();
  }

  async #serve(conn: Deno.Conn, state: Connection): Promise<void> {
    const buffer = new Uint8Array(this.#limits.maxHeaderBytes);
    let used = 0;
    try {
      for (;;) {
        if (used === buffer.length) {
          return await this.#reply(conn, state, { status: 431, body: "" }, "close");
        }
        const n = await conn.read(buffer.subarray(used));
        if (n === null) return;
        const scanFrom = used;
        used += n;
        let start = 0;
        let end = findHeadEnd(buffer, Math.max(scanFrom - 2, 0), used);
        while (end >= 0) {
          const parsed = parseHead(decoder.decode(withoutEmptyLine(buffer.subarray(start, end))));
          if (parsed.kind === "bad") {
            return await this.#reply(conn, state, { status: parsed.status, body: "" }, "close");
          }
          const response = this.#respond(parsed.request);
          const head = parsed.request.method === "HEAD";
          await this.#reply(conn, state, response, parsed.connection, head);
          if (parsed.close) return;
          state.deadline = performance.now() + this.#limits.requestTimeoutMs;
          start = end;
          end = findHeadEnd(buffer, start, used);
        }
        buffer.copyWithin(0, start, used);
        used -= start;
      }
    } catch {
      // Reset, cut off by a deadline or at shutdown: the connection is all there is to clean up.
    } finally {
      this.#abort(conn, state);
      // Only now is its descriptor released: its read or write has settled.
      this.#forget(conn);
    }
  }

  #respond(request: HttpRequest): HttpResponse {
    try {
      return this.#handler(request);
    } catch {
      // A handler bug must not take the connection loop down with it.
      return { status: 500, body: "internal error\n" };
    }
  }

  async #reply(
    conn: Deno.Conn,
    state: Connection,
    response: HttpResponse,
    connection: ConnectionHeader,
    head = false,
  ): Promise<void> {
    let bytes = encodeCached(response, head, connection);
    state.writingSince = performance.now();
    while (bytes.length > 0) bytes = bytes.subarray(await conn.write(bytes));
    state.writingSince = null;
  }
}
