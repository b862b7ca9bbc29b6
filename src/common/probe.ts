/** One bounded, asynchronous run of a tcp, http or file check (`--ready-when`, `--drain-while`). */

import { quietDelay } from "./delay.ts";
import { errorLine, orElse } from "./errors.ts";
import { type PolledCheck, READY_TIMEOUT_MS } from "./ready.ts";

/** The longest status line an http check reads before it gives up on the answer. */
const STATUS_LINE_BYTES = 4096;

type Found = [passing: boolean, found: string];

function reason(err: unknown): Found {
  if (err instanceof Deno.errors.ConnectionRefused) return [false, "connection refused"];
  if (err instanceof Deno.errors.NotFound) return [false, "no such file"];
  return [false, errorLine(err)];
}

/** One HTTP/1.0 GET (no proxy: the check is local, as kubelet's httpGet is). */
async function httpStatus(conn: Deno.Conn, port: number, path: string): Promise<number> {
  const request = `GET ${path} HTTP/1.0\r\nHost: 127.0.0.1:${port}\r\n` +
    `User-Agent: denit-ready-check\r\nConnection: close\r\n\r\n`;
  const bytes = new TextEncoder().encode(request);
  for (let done = 0; done < bytes.length;) done += await conn.write(bytes.subarray(done));
  const head = new Uint8Array(STATUS_LINE_BYTES);
  let filled = 0;
  // Up to the status line's "\n", or what fits.
  while (filled < head.length && !head.subarray(0, filled).includes(10)) {
    const n = await conn.read(head.subarray(filled));
    if (n === null) break;
    filled += n;
  }
  const line = new TextDecoder().decode(head.subarray(0, filled)).split("\n")[0] ?? "";
  const match = /^HTTP\/\d\.\d (\d{3})/.exec(line);
  if (match === null) throw new Error("not an HTTP answer");
  return Number(match[1]);
}

/** Runs one check, for READY_TIMEOUT_MS at most; resolves to [passing, what it found]. */
export async function probe(check: PolledCheck): Promise<Found> {
  const open: Deno.Conn[] = [];
  let over = false;
  const run = async (): Promise<Found> => {
    if (check.kind === "file") {
      await Deno.stat(check.path);
      return [true, "exists"];
    }
    const conn = await Deno.connect({ hostname: "127.0.0.1", port: check.port });
    open.push(conn);
    if (over) conn.close(); // connected after the answer was given
    if (check.kind === "tcp") return [true, "connected"];
    const status = await httpStatus(conn, check.port, check.path);
    return [status >= 200 && status < 300, `HTTP ${status}`];
  };
  const late = quietDelay(READY_TIMEOUT_MS)
    .then((): Found => [false, `no answer in ${READY_TIMEOUT_MS} ms`]);
  try {
    return await Promise.race([run().catch(reason), late]);
  } finally {
    over = true;
    for (const conn of open) orElse(() => conn.close(), undefined); // closed already
  }
}
