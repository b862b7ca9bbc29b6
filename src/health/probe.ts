/**
 * `denit probe`: asks the health endpoint one question and exits 0 for a 2xx answer, 1 for
 * anything else, with one line; a HEALTHCHECK or an exec probe that needs no shell and no
 * curl in the image. One GET over a plain TCP connection: the endpoint answers one request a
 * connection and closes, so the answer is read to its end.
 */

import {
  DEFAULT_HEALTH,
  formatAddress,
  type ListenAddress,
  parseListenAddress,
} from "../common/address.ts";
import { type OptionSpec, parseFrom, scanArgs, Settings } from "../common/args.ts";
import { formatDuration, parseDuration } from "../common/duration.ts";
import { UsageError } from "../common/errors.ts";
import { ExitCode } from "../common/exit_codes.ts";
import { printErr, printOut } from "../common/log.ts";

const USAGE = "Usage: denit probe [--health-addr ADDR] [--path PATH] [--timeout DURATION]";

/** How long a probe waits for the whole answer unless --timeout says otherwise. */
export const DEFAULT_PROBE_TIMEOUT_MS = 5000;

/** `denit probe --help`. */
export const PROBE_HELP = `${USAGE}

Sends GET PATH (default /healthz) to denit's health endpoint and exits 0 when it
answers 2xx, 1 otherwise (refused, timed out, or another status), with one line
saying what it got; 2 for a usage error. For HEALTHCHECK CMD ["/denit", "probe"] and
exec probes in images without a shell.

  --health-addr ADDR   where the endpoint listens      DENIT_HEALTH_ADDR=ADDR
                       (default :7623; a wildcard host is reached on loopback)
  --path PATH          the path to ask (/healthz, /readyz, /livez)
  --timeout DURATION   for the connection and the answer (default 5s)`;

const OPTIONS: readonly OptionSpec[] = [
  { key: "health-addr", names: ["--health-addr"], kind: "value", env: "DENIT_HEALTH_ADDR" },
  { key: "path", names: ["--path"], kind: "value" },
  { key: "timeout", names: ["--timeout"], kind: "value" },
  { key: "help", names: ["-h", "--help"], kind: "flag" },
];

/** What to ask, and where. */
export interface ProbeRequest {
  readonly address: ListenAddress;
  readonly path: string;
  readonly timeoutMs: number;
}

function parsePath(text: string): string {
  const path = text.trim();
  if (!/^\/[\x21-\x7e]*$/.test(path)) {
    throw new RangeError(`Invalid path "${text}": use an absolute path like /healthz`);
  }
  return path;
}

function parseTimeout(text: string): number {
  const ms = parseDuration(text);
  if (ms === 0) throw new RangeError(`Invalid timeout "${text}": it must be above 0`);
  return ms;
}

/** Parses `probe ARGS` (without "probe"); throws UsageError. */
export function parseProbeArgs(args: readonly string[]): ProbeRequest | "help" {
  const scan = scanArgs(args, OPTIONS, { stopAtPositional: false });
  if (scan.flags.has("help")) return "help";
  if (scan.positional.length > 0) {
    throw new UsageError(`Unexpected argument "${scan.positional[0]}": probe takes options only`);
  }
  const settings = new Settings(scan, OPTIONS, Deno.env.toObject());
  const addr = settings.last("health-addr");
  const path = settings.last("path");
  const timeout = settings.last("timeout");
  return Object.freeze({
    address: addr === undefined ? DEFAULT_HEALTH : parseFrom(addr, parseListenAddress),
    path: path === undefined ? "/healthz" : parseFrom(path, parsePath),
    timeoutMs: timeout === undefined ? DEFAULT_PROBE_TIMEOUT_MS : parseFrom(timeout, parseTimeout),
  });
}

/** A wildcard address is reached on loopback: IPv4 first (a "::" listener takes it too). */
function targets(address: ListenAddress): string[] {
  if (address.hostname === "::" || address.hostname === "0.0.0.0") {
    return address.hostname === "::" ? ["127.0.0.1", "::1"] : ["127.0.0.1"];
  }
  return [address.hostname];
}

async function connect(address: ListenAddress): Promise<Deno.TcpConn> {
  // The first failure is the one to tell: a host without IPv6 fails ::1 for another reason.
  const failures: unknown[] = [];
  for (const hostname of targets(address)) {
    try {
      return await Deno.connect({ hostname, port: address.port });
    } catch (err: unknown) {
      failures.push(err);
    }
  }
  throw failures[0];
}

/** An answer's status line and the first line of its body. */
interface Answer {
  readonly status: number;
  readonly statusLine: string;
  readonly body: string;
}

/** The endpoint's answers are small (16 KiB at most): more than this is not the endpoint. */
const MAX_ANSWER = 64 * 1024;

async function ask(conn: Deno.TcpConn, request: ProbeRequest): Promise<Answer> {
  const host = formatAddress({ ...request.address, hostname: conn.remoteAddr.hostname });
  await conn.write(
    new TextEncoder().encode(
      `GET ${request.path} HTTP/1.1\r\nhost: ${host}\r\nuser-agent: denit-probe\r\n` +
        `connection: close\r\n\r\n`,
    ),
  );
  const chunks: Uint8Array[] = [];
  let size = 0;
  const buffer = new Uint8Array(16 * 1024);
  for (;;) {
    const n = await conn.read(buffer);
    if (n === null) break;
    chunks.push(buffer.slice(0, n));
    size += n;
    if (size > MAX_ANSWER) break;
  }
  const text = new TextDecoder().decode(concat(chunks, size));
  const match = /^HTTP\/1\.[01] (\d{3})([^\r\n]*)\r?\n/.exec(text);
  if (match === null) throw new Error("the answer is not HTTP/1.1");
  const split = text.indexOf("\r\n\r\n");
  const body = split < 0 ? "" : text.slice(split + 4).split("\n")[0]?.trim() ?? "";
  return {
    status: Number(match[1]),
    statusLine: `${match[1]}${match[2] ?? ""}`.trim(),
    body: body.slice(0, 200),
  };
}

function concat(chunks: readonly Uint8Array[], size: number): Uint8Array {
  const all = new Uint8Array(size);
  let at = 0;
  for (const chunk of chunks) {
    all.set(chunk, at);
    at += chunk.length;
  }
  return all;
}

function reasonOf(err: unknown): string {
  if (err instanceof Deno.errors.ConnectionRefused) return "connection refused";
  if (err instanceof Error) return err.message.split("\n")[0] ?? err.name;
  return String(err);
}

/** One probe: the exit code and the line that says why. */
export async function probe(request: ProbeRequest): Promise<{ code: number; line: string }> {
  const shown = { ...request.address, hostname: targets(request.address)[0] ?? "" };
  const url = `http://${formatAddress(shown)}${request.path}`;
  const started = performance.now();
  let conn: Deno.TcpConn | null = null;
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timedOut = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new Error(`no answer within ${formatDuration(request.timeoutMs)}`)),
      request.timeoutMs,
    );
  });
  const answering = (async () => {
    conn = await connect(request.address);
    return await ask(conn, request);
  })();
  // After a timeout the close below fails the read still under way: that is the timeout's doing.
  answering.catch(() => {});
  try {
    const answer = await Promise.race([answering, timedOut]);
    const ms = Math.round(performance.now() - started);
    const said = answer.body === "" ? "" : `: ${answer.body}`;
    const line = `${url}: ${answer.statusLine} in ${ms} ms${said}`;
    const healthy = answer.status >= 200 && answer.status < 300;
    return { code: healthy ? ExitCode.OK : ExitCode.FAILED, line };
  } catch (err: unknown) {
    return { code: ExitCode.FAILED, line: `${url}: ${reasonOf(err)}` };
  } finally {
    clearTimeout(timer);
    try {
      (conn as Deno.TcpConn | null)?.close();
    } catch {
      // Already closed: nothing to release.
    }
  }
}

/** Runs `denit probe ARGS`; resolves to the exit code. */
export async function probeMain(args: readonly string[]): Promise<number> {
  let request: ProbeRequest | "help";
  try {
    request = parseProbeArgs(args);
  } catch (err: unknown) {
    if (!(err instanceof UsageError)) throw err;
    printErr(`denit probe: ${err.message}\n${USAGE}`);
    return ExitCode.USAGE;
  }
  if (request === "help") {
    printOut(PROBE_HELP);
    return ExitCode.OK;
  }
  const { code, line } = await probe(request);
  if (code === ExitCode.OK) printOut(`denit probe: ${line}`);
  else printErr(`denit probe: ${line}`);
  return code;
}
