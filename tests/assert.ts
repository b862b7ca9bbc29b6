/** The assertion functions tests use: node:assert/strict behind one small module. */

import assert from "node:assert/strict";

/** Deep strict equality. */
export function assertEquals<T>(actual: T, expected: T, message?: string): void {
  // Without a message, node:assert writes its own diff (an undefined one would replace it).
  if (message === undefined) assert.deepStrictEqual(actual, expected);
  else assert.deepStrictEqual(actual, expected, message);
}

/** The text matches the pattern. */
export function assertMatch(actual: string, pattern: RegExp, message?: string): void {
  if (message === undefined) assert.match(actual, pattern);
  else assert.match(actual, pattern, message);
}

/** The condition holds. */
export function assertOk(condition: unknown, message?: string): asserts condition {
  if (message === undefined) assert.ok(condition);
  else assert.ok(condition, message);
}

/** The function throws an error of this class whose message matches. */
export function assertThrows(
  fn: () => unknown,
  errorClass: new (...args: never[]) => Error,
  pattern?: RegExp,
): void {
  assert.throws(fn, (err: unknown) => {
    assert.ok(err instanceof errorClass, `expected ${errorClass.name}, got ${String(err)}`);
    if (pattern !== undefined) assert.match(err.message, pattern);
    return true;
  });
}

/** The value, which must be there (an index the test knows exists). */
export function defined<T>(value: T | undefined | null, what = "value"): T {
  assert.ok(value !== undefined && value !== null, `${what} is missing`);
  return value;
}
