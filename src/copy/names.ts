/** Names as raw bytes (a name need not be UTF-8): decoded only to print one. */

import { printable } from "../common/log.ts";
import { randomHex } from "../common/paths.ts";

const encoder = new TextEncoder();
const decoder = new TextDecoder();
const TEMP_PREFIX = ".denit-";

/** The UTF-8 bytes of a name given as text (command-line arguments are text). */
export function bytesOf(name: string): Uint8Array {
  return encoder.encode(name);
}

/** A path for messages: `base/name`, with bytes that are not UTF-8 shown as \xNN. */
export function display(base: string, name: Uint8Array): string {
  return `${base}/${printable(name)}`;
}

/** A temporary name: `.denit-` and 12 hex digits, 19 bytes whatever the final name. */
export function tempName(): Uint8Array {
  return encoder.encode(TEMP_PREFIX + randomHex(6));
}

/** True for a name `tempName()` makes: what a killed earlier run left behind. */
export function isTempName(name: Uint8Array): boolean {
  if (name.length !== TEMP_PREFIX.length + 12) return false;
  const text = decoder.decode(name);
  return text.startsWith(TEMP_PREFIX) && /^[0-9a-f]{12}$/.test(text.slice(TEMP_PREFIX.length));
}

/** Byte-wise comparison, for a stable order of directory entries. */
export function compareNames(a: Uint8Array, b: Uint8Array): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    const d = (a[i] ?? 0) - (b[i] ?? 0);
    if (d !== 0) return d;
  }
  return a.length - b.length;
}

export function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  return a.length === b.length && compareNames(a, b) === 0;
}
