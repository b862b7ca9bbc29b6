/** One bounded, asynchronous run of a tcp, http or file check (`--ready-when`, `--drain-while`). */

import { errorLine } from "./errors.ts";
import { type PolledCheck, READY_TIMEOUT_MS } from "./ready.ts";

/** The longest status line an http check reads before it gives up on the answer. */
const STATUS_LINE_BYTES = 4096;

class TimedOut extends Error {}

/** `promise`, or TimedOut after `ms`; `cleanup` gets a value that came too late. */
function withTimeout<T>(promise: Promise<T>, ms: number, cleanup: (late: T) => void): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    let late = false;
    const timer = setTimeout(() => {
      late = true;
      reject(new TimedOut(`no answer in ${READY_TIMEOUT_MS} ms`));
    }, ms);
    promise.then(
      (value) => {
        if (late) cleanup(value);
        clearTimeout(timer);
        resolve(value);
      },
      (err: unknown) => {
        clearTimeout(timer);
        reject(err);
      },
    );
  });
}

function reason(err: unknown): string {
  if (err instanceof Deno.errors.ConnectionRefused) return "connection refused";
  if (err instanceof Deno.errors.NotFound) return "no such file";
  return errorLine(err);
}

async function connect(port: number): Promise<Deno.TcpConn> {
  return await withTimeout(
    Deno.connect({ hostname: "127.0.0.1", port }),
    READY_TIMEOUT_MS,
    (conn) => conn.close(),
  );
}

/** One HTTP/1.0 GET (no proxy: the check is local, as kubelet's httpGet is). */
async function httpStatus(port: number, path: string): Promise<number> {
  const deadline = performance.now() + READY_TIMEOUT_MS;
  const conn = await connect(port);
  try {
    const request = `GET ${path} HTTP/1.0\r\nHost: 127.0.0.1:${port}\r\n` +
      `User-Agent: denit-ready-check\r\nConnection: close\r\n\r\n`;
    const bytes = new TextEncoder().encode(request);
    const head = new Uint8Array(STATUS_LINE_BYTES);
    let filled = 0;
    const exchange = async () => {
      for (let written = 0; written < bytes.length;) {
        written += await conn.write(bytes.subarray(written));
      }
      while (filled < head.length) {
        const n = await conn.read(head.subarray(filled));
        if (n === null) break;
        filled += n;
        if (head.subarray(0, filled).includes(10)) break; // "\n": the status line is in
      }
    };
    // A late answer needs no cleanup: the connection is closed below either way.
    await withTimeout(exchange(), Math.max(1, deadline - performance.now()), () => {});
    const line = new TextDecoder().decode(head.subarray(0, filled)).split("\n")[0] ?? "";
    const match = /^HTTP\/\d\.\d (\d{3})/.exec(line);
    if (match === null) throw new Error("not an HTTP answer");
    return Number(match[1]);
  } finally {
    try {
      conn.close();
    } catch {
      // Closed by the timeout's failure path already.
    }
  }
}

/** Runs one check; resolves to [passing, what it found]. */
export async function probe(check: PolledCheck): Promise<[boolean, string]> {
  try {
    switch (check.kind) {
      case "tcp":
        (await connect(check.port)).close();
        return [true, "connected"];
      case "http": {
        const status = await httpStatus(check.port, check.path);
        return [status >= 200 && status < 300, `HTTP ${status}`];
      }
      case "file":
        await Deno.stat(check.path);
        return [true, "exists"];
    }
  } catch (err: unknown) {
    return [false, reason(err)];
  }
}
