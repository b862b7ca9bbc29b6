/** Errors that callers catch by class. */

/** A bad command line or environment variable; the message is one line naming its source. */
export class UsageError extends Error {
  override name = "UsageError";
}

/** The first line of an error's message, or of what was thrown; `named`: after the error's name. */
export function errorLine(err: unknown, named = false): string {
  const text = err instanceof Error
    ? (named ? `${err.name}: ${err.message}` : err.message)
    : String(err);
  return text.split("\n")[0] ?? "";
}
