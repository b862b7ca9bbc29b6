/** Errors that callers catch by class. */

/** A bad command line or environment variable; the message is one line naming its source. */
export class UsageError extends Error {
  override name = "UsageError";
}

/** What `work` returns, or `fallback` if it throws: for failures that change nothing (say why). */
export function orElse<T>(work: () => T, fallback: T): T {
  try {
    return work();
  } catch {
    return fallback;
  }
}

/** The first line of an error's message, or of what was thrown; `named`: after the error's name. */
export function errorLine(err: unknown, named = false): string {
  const text = err instanceof Error
    ? (named ? `${err.name}: ${err.message}` : err.message)
    : String(err);
  return text.split("\n")[0] ?? "";
}
