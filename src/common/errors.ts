/** Errors that callers catch by class. */

/** A bad command line or environment variable; the message is one line naming its source. */
export class UsageError extends Error {
  override name = "UsageError";
}
