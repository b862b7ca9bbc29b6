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
}

/** Defaults: room for a load test at 50 connections and for probes beside it. */
export const DEFAULT_LIMITS: HttpLimits = Object.freeze({
  maxConnections: 256,
  maxHeaderBytes: 8192,
  requestTimeoutMs: 5000,
});

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
const REQUEST_LINE = /^([A-Z]{1,16}) (\S{1,2048}) HTTP\/1\.([01])$/;
const HEADER = /^([!#$%&'*+.^_`|~0-9A-Za-z-]+):[ \t]*(.*?)[ \t]*$/;

// Constant responses (the same frozen object each time) are encoded once per variant.
const encoded = new WeakMap<HttpResponse, Array<Uint8Array | undefined>>();

function encodeCached(response: HttpResponse, head: boolean, close: boolean): Uint8Array {
  if (!Object.isFrozen(response)) return encodeResponse(response, head, close);
  let variants = encoded.get(response);
  if (variants === undefined) encoded.set(response, variants = []);
  const index = (head ? 2 : 0) + (close ? 1 : 0);
  return variants[index] ??= encodeResponse(response, head, close);
}

/** Serialises a response; exported for tests. */
export function encodeResponse(response: HttpResponse, head: boolean, close: boolean): Uint8Array {
  const body = encoder.encode(response.body);
  const lines = [
    `HTTP/1.1 ${response.status} ${REASONS[response.status] ?? "Unknown"}`,
    `content-type: ${response.contentType ?? "text/plain; charset=utf-8"}`,
    `content-length: ${body.length}`,
    "cache-control: no-store",
    ...Object.entries(response.headers ?? {}).map(([name, value]) => `${name}: ${value}`),
    ...(close ? ["connection: close"] : []),
  ];
  const header = encoder.encode(`${lines.join("\r\n")}\r\n\r\n`);
  if (head) return header;
  const out = new Uint8Array(header.length + body.length);
  out.set(header);
  out.set(body, header.length);
  return out;
}

function findHeaderEnd(buffer: Uint8Array, from: number, to: number): number {
  for (let i = Math.max(from, 3); i < to; i++) {
    if (buffer[i] === 10 && buffer[i - 1] === 13 && buffer[i - 2] === 10 && buffer[i - 3] === 13) {
      return i + 1;
    }
  }
  return -1;
}

type Parsed =
  | { kind: "request"; request: HttpRequest; close: boolean }
  | { kind: "bad"; status: number };

/** Parses a request head (request line and headers, without the blank line); exported for tests. */
export function parseHead(text: string): Parsed {
  const lines = text.split("\r\n");
  const line = REQUEST_LINE.exec(lines[0]);
  if (line === null) return { kind: "bad", status: 400 };
  let close = line[3] === "0";
  for (const raw of lines.slice(1)) {
    const header = HEADER.exec(raw);
    if (header === null) return { kind: "bad", status: 400 };
    const name = header[1].toLowerCase();
    const value = header[2].toLowerCase();
    if (name === "connection" && value.includes("close")) close = true;
    if (name === "connection" && value.includes("keep-alive")) close = false;
    // Nothing here reads a body: answer, then close rather than misread it as a next request.
    if (name === "transfer-encoding" || (name === "content-length" && value !== "0")) close = true;
  }
  const target = line[2];
  const pathStart = target.startsWith("/") ? 0 : target.indexOf("/", target.indexOf("//") + 2);
  if (pathStart < 0 || !/^https?:\/\/|^\//.test(target)) return { kind: "bad", status: 400 };
  const path = target.slice(pathStart).split("?")[0];
  return { kind: "request", request: { method: line[1], path }, close };
}

/** The listening server; `close()` drops the listener and every connection at once. */
export class HttpServer {
  readonly #listener: Deno.TcpListener;
  readonly #handler: (request: HttpRequest) => HttpResponse;
  readonly #limits: HttpLimits;
  /** Each connection and the time by which its next complete request must have arrived. */
  readonly #connections = new Map<Deno.Conn, number>();
  readonly #sweeper: ReturnType<typeof setInterval>;
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
    const every = Math.max(10, Math.min(1000, limits.requestTimeoutMs / 4));
    this.#sweeper = setInterval(() => this.#sweep(), every);
    void this.#acceptLoop();
  }

  #sweep(): void {
    const now = performance.now();
    for (const [conn, deadline] of this.#connections) if (now > deadline) this.#drop(conn);
  }

  /** The bound address (useful with port 0). */
  get address(): Deno.NetAddr {
    return this.#listener.addr;
  }

  /** Connections held now. */
  get connectionCount(): number {
    return this.#connections.size;
  }

  /** Stops listening and closes every connection; synchronous. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    clearInterval(this.#sweeper);
    this.#listener.close();
    for (const conn of [...this.#connections.keys()]) this.#drop(conn);
  }

  async #acceptLoop(): Promise<void> {
    while (!this.#closed) {
      let conn: Deno.Conn;
      try {
        conn = await this.#listener.accept();
      } catch (err: unknown) {
        if (this.#closed || err instanceof Deno.errors.BadResource) return;
        // EMFILE and friends: keep serving the connections we have; retry on the next turn.
        await new Promise((resolve) => setTimeout(resolve, 10));
        continue;
      }
      if (this.#connections.size >= this.#limits.maxConnections) this.#dropLeastRecent();
      this.#connections.set(conn, performance.now() + this.#limits.requestTimeoutMs);
      void this.#serve(conn);
    }
  }

  #dropLeastRecent(): void {
    // The earliest deadline belongs to the connection that has been quiet the longest.
    let oldest: Deno.Conn | null = null;
    let oldestDeadline = Infinity;
    for (const [conn, deadline] of this.#connections) {
      if (deadline < oldestDeadline) [oldest, oldestDeadline] = [conn, deadline];
    }
    if (oldest !== null) this.#drop(oldest);
  }

  #drop(conn: Deno.Conn): void {
    if (!this.#connections.delete(conn)) return;
    try {
      conn.close();
    } catch {
      // Already closed by the peer's reset: nothing left to release.
    }
  }

  async #serve(conn: Deno.Conn): Promise<void> {
    const buffer = new Uint8Array(this.#limits.maxHeaderBytes);
    let used = 0;
    try {
      for (;;) {
        if (used === buffer.length) return await this.#reply(conn, { status: 431, body: "" }, true);
        const n = await conn.read(buffer.subarray(used));
        if (n === null) return;
        const scanFrom = used;
        used += n;
        let start = 0;
        let end = findHeaderEnd(buffer, Math.max(scanFrom - 3, 0), used);
        while (end >= 0) {
          const parsed = parseHead(decoder.decode(buffer.subarray(start, end - 4)));
          if (parsed.kind === "bad") {
            return await this.#reply(conn, { status: parsed.status, body: "" }, true);
          }
          const response = this.#respond(parsed.request);
          await this.#reply(conn, response, parsed.close, parsed.request.method === "HEAD");
          if (parsed.close) return;
          if (this.#connections.has(conn)) {
            this.#connections.set(conn, performance.now() + this.#limits.requestTimeoutMs);
          }
          start = end;
          end = findHeaderEnd(buffer, start, used);
        }
        buffer.copyWithin(0, start, used);
        used -= start;
      }
    } catch {
      // Reset, closed by a deadline or at shutdown: the connection is all there is to clean up.
    } finally {
      this.#drop(conn);
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

  async #reply(conn: Deno.Conn, response: HttpResponse, close: boolean, head = false) {
    let bytes = encodeCached(response, head, close);
    while (bytes.length > 0) bytes = bytes.subarray(await conn.write(bytes));
  }
}
