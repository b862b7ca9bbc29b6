/** `--ready-when` and `--drain-while` checks: parsed by the command line, run elsewhere. */

/** A check that runs every READY_INTERVAL_MS: tcp, http or file. */
export type PolledCheck =
  | { readonly kind: "tcp"; readonly port: number }
  | { readonly kind: "http"; readonly port: number; readonly path: string }
  | { readonly kind: "file"; readonly path: string };

/** `--ready-when`: a polled check, or `notify` (sd_notify READY=1). */
export type ReadyCheck = PolledCheck | { readonly kind: "notify" };

/** `--drain-while`: a polled check, or `jobs` (the job service has jobs running). */
export type DrainCheck = PolledCheck | { readonly kind: "jobs" };

/** How often a tcp, http or file check runs, and how long each may take. */
export const READY_INTERVAL_MS = 1000;
export const READY_TIMEOUT_MS = 1000;

/** Parses tcp:PORT, http:PORT/PATH or file:PATH; null for another word. */
function parsePolled(text: string): PolledCheck | null {
  const trimmed = text.trim();
  const port = (value: string) => {
    const n = /^\d{1,5}$/.test(value) ? Number(value) : NaN;
    if (!(n >= 1 && n <= 65535)) {
      throw new RangeError(`Invalid check "${text}": a port is 1 to 65535`);
    }
    return n;
  };
  if (trimmed.startsWith("tcp:")) return { kind: "tcp", port: port(trimmed.slice(4)) };
  if (trimmed.startsWith("http:")) {
    const rest = trimmed.slice(5);
    const slash = rest.indexOf("/");
    const path = slash < 0 ? "/" : rest.slice(slash);
    if ([...path].some((c) => c <= " " || c === "\x7f")) {
      throw new RangeError(`Invalid check "${text}": the path has a space or control character`);
    }
    return { kind: "http", port: port(slash < 0 ? rest : rest.slice(0, slash)), path };
  }
  if (trimmed.startsWith("file:") && trimmed.length > 5) {
    return { kind: "file", path: trimmed.slice(5) };
  }
  return null;
}

/** Parses tcp:PORT, http:PORT/PATH, file:PATH or `word` (notify, jobs); else a RangeError. */
export function parseCheck<W extends "notify" | "jobs">(
  text: string,
  word: W,
): PolledCheck | { kind: W } {
  if (text.trim() === word) return { kind: word };
  const check = parsePolled(text);
  if (check !== null) return check;
  throw new RangeError(
    `Invalid check "${text}": use tcp:PORT, http:PORT/PATH, file:PATH or ${word}`,
  );
}

/** The check as written on the command line. */
export function formatCheck(check: ReadyCheck | DrainCheck): string {
  if (check.kind === "tcp") return `tcp:${check.port}`;
  if (check.kind === "http") return `http:${check.port}${check.path}`;
  return check.kind === "file" ? `file:${check.path}` : check.kind;
}
