/**
 * HTTP/1.1 for the health endpoint, one request per connection. Unlike `Deno.serve`, it bounds
 * what clients cost PID 1: a fixed buffer, a deadline, a connection cap, answers that fit a send
 * buffer (a write completes whether or not the client reads).
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

export interface HttpLimits {
  /** Connections held at once; at the limit the oldest is closed. */
  readonly maxConnections: number;
  /** Bytes of request line plus headers. */
  readonly maxHeaderBytes: number;
  /** A connection is closed this long after it was accepted, answered or not. */
  readonly requestTimeoutMs: number;
}

/** Defaults: room for a load test at 50 connections and for probes beside it. */
export const DEFAULT_LIMITS: HttpLimits = Object.freeze({
  maxConnections: 256,
  maxHeaderBytes: 8192,
  requestTimeoutMs: 5000,
});

/** The largest answer: a socket's initial send buffer (net.ipv4.tcp_wmem's default). */
export const MAX_RESPONSE_BYTES = 16 * 1024;

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

/** Serialises a response (always `connection: close`). */
export function encodeResponse(response: HttpResponse, head: boolean): Uint8Array {
  const body = encoder.encode(response.body);
  const lines = [
    `HTTP/1.1 ${response.status} ${REASONS[response.status] ?? "Unknown"}`,
    `content-type: ${response.contentType ?? "text/plain; charset=utf-8"}`,
    `content-length: ${body.length}`,
    "cache-control: no-store",
    ...Object.entries(response.headers ?? {}).map(([name, value]) => `${name}: ${value}`),
    "connection: close",
  ];
  const header = encoder.encode(`${lines.join("\r\n")}\r\n\r\n`);
  if (head) return header;
  const out = new Uint8Array(header.length + body.length);
  out.set(header);
  out.set(body, header.length);
  return out;
}

/** The index after the empty line (CRLF or LF) that ends a head in `buffer[from, to)`; else -1. */
export function findHeadEnd(buffer: Uint8Array, from: number, to: number): number {
  for (let i = Math.max(from, 1); i < to; i++) {
    if (buffer[i] !== 10) continue;
    if (buffer[i - 1] === 10) return i + 1; // LF LF
    if (buffer[i - 1] === 13 && i >= 2 && buffer[i - 2] === 10) return i + 1; // LF CR LF
  }
  return -1;
}

/** Method, origin- or absolute-form target of visible ASCII, HTTP/1.x; linear (no backtracking). */
const REQUEST_LINE =
  /^([A-Z]{1,16}) ((?:https?:\/\/[\x21-\x2e\x30-\x7e]*)?(\/[\x21-\x7e]*)) HTTP\/1\.[01]$/;
/** A header line starts with a name of RFC 9110 token characters and a colon. */
const HEADER_NAME = /^[-!#$%&'*+.^_`|~0-9A-Za-z]+:/;
const MAX_TARGET = 2048;

/** Parses a request head without its empty line (null: a bad one, 400); header values unread. */
export function parseHead(text: string): HttpRequest | null {
  const lines = text.split("\n").map((line) => line.endsWith("\r") ? line.slice(0, -1) : line);
  const line = REQUEST_LINE.exec(lines[0] ?? "");
  if (line === null || (line[2] ?? "").length > MAX_TARGET) return null;
  if (!lines.slice(1).every((header) => HEADER_NAME.test(header))) return null;
  const [, method = "", , target = "/"] = line;
  return { method, path: target.split("?")[0] ?? "/" };
}

/** The listening server; `close()` drops the listener and every connection at once. */
export class HttpServer {
  readonly #listener: Deno.TcpListener;
  readonly #handler: (request: HttpRequest) => HttpResponse;
  readonly #limits: HttpLimits;
  /** Open connections and their deadlines (performance.now() ms), oldest first. */
  readonly #connections = new Map<Deno.Conn, number>();
  /** Closed connections whose read has not settled: their descriptors still count at the cap. */
  #closing = 0;
  #settled = Promise.withResolvers<void>();
  readonly #sweeper: ReturnType<typeof setInterval>;
  #closed = false;

  /** Binds at once (throws Deno.errors.AddrInUse and the like); serving starts on the loop. */
  constructor(
    address: { hostname: string; port: number },
    handler: (request: HttpRequest) => HttpResponse,
    limits: HttpLimits = DEFAULT_LIMITS,
  ) {
    // As deep as somaxconn allows: an overflow makes a probe's SYN wait 1 s to be resent.
    this.#listener = Deno.listen({ ...address, tcpBacklog: 4096 });
    this.#handler = handler;
    this.#limits = limits;
    // One timer for all deadlines: a timer per request would cost more than the request.
    const every = Math.max(10, Math.min(1000, limits.requestTimeoutMs / 4));
    this.#sweeper = setInterval(() => this.#sweep(), every);
    void this.#acceptLoop();
  }

  /** Closes the connections past their deadline: the oldest first, so it stops at a live one. */
  #sweep(): void {
    const now = performance.now();
    for (const [conn, deadline] of this.#connections) {
      if (deadline > now) return;
      this.#drop(conn);
    }
  }

  get address(): Deno.NetAddr {
    return this.#listener.addr;
  }

  get connectionCount(): number {
    return this.#connections.size;
  }

  /** Stops listening and closes every connection; synchronous. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    clearInterval(this.#sweeper);
    this.#listener.close();
    for (const conn of this.#connections.keys()) this.#drop(conn);
    this.#settled.resolve();
  }

  async #acceptLoop(): Promise<void> {
    let failures = 0;
    while (!this.#closed) {
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
      // At the cap the oldest go, a sixteenth of the cap at a time, and the accept waits until
      // their descriptors are released (a turn of the loop later), so a flood cannot outrun it.
      if (this.#connections.size + this.#closing >= this.#limits.maxConnections) {
        let batch = Math.ceil(this.#limits.maxConnections / 16);
        for (const oldest of this.#connections.keys()) {
          if (batch-- === 0) break;
          this.#drop(oldest);
        }
      }
      while (this.#connections.size + this.#closing >= this.#limits.maxConnections) {
        if (this.#closed) return conn.close();
        await this.#settled.promise;
      }
      this.#connections.set(conn, performance.now() + this.#limits.requestTimeoutMs);
      void this.#serve(conn);
    }
  }

  /** Closes a connection (a pending read ends with an error, which #serve ignores). */
  #drop(conn: Deno.Conn): void {
    if (!this.#connections.delete(conn)) return;
    this.#closing++;
    try {
      conn.close();
    } catch {
      // Already closed: nothing left to release.
    }
  }

  async #serve(conn: Deno.Conn): Promise<void> {
    const buffer = new Uint8Array(this.#limits.maxHeaderBytes);
    let used = 0;
    try {
      let end = -1;
      while (end < 0) {
        if (used === buffer.length) return await this.#reply(conn, { status: 431, body: "" });
        const n = await conn.read(buffer.subarray(used));
        if (n === null) return;
        end = findHeadEnd(buffer, Math.max(used - 2, 0), used + n);
        used += n;
      }
      // The head without the line ends of its final empty line.
      const request = parseHead(decoder.decode(buffer.subarray(0, end)).replace(/[\r\n]+$/, ""));
      if (request === null) return await this.#reply(conn, { status: 400, body: "" });
      await this.#reply(conn, this.#respond(request), request.method === "HEAD");
    } catch {
      // Reset, cut off by its deadline or the cap, or at shutdown: nothing else to clean up.
    } finally {
      this.#drop(conn);
      // Its read and write have settled: its descriptor is gone.
      this.#closing--;
      this.#settled.resolve();
      this.#settled = Promise.withResolvers<void>();
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

  async #reply(conn: Deno.Conn, response: HttpResponse, head = false): Promise<void> {
    let bytes = encodeResponse(response, head);
    if (bytes.length > MAX_RESPONSE_BYTES) bytes = encodeResponse(TOO_LARGE, head);
    while (bytes.length > 0) bytes = bytes.subarray(await conn.write(bytes));
  }
}

/** What an answer over MAX_RESPONSE_BYTES becomes (a bug: the routes' answers are bounded). */
const TOO_LARGE: HttpResponse = { status: 500, body: "answer too large\n" };
