/**
 * The runtime's code pages touched at start count in RSS, and so in the OOM killer's choice:
 * dropped (MADV_DONTNEED) they stay page cache. Only mappings the loader never writes.
 */

import { libc } from "./symbols.ts";

const MADV_DONTNEED = 4; // asm-generic/mman-common.h

/**
 * The executable's text (r-xp) and first read-only segment (r--p at offset 0) from
 * /proc/self/maps; never RELRO, whose pages the loader wrote.
 */
export function droppableMappings(maps: string, executable: string): Array<[bigint, bigint]> {
  const found: Array<[bigint, bigint]> = [];
  for (const line of maps.split("\n")) {
    const fields = /^([0-9a-f]+)-([0-9a-f]+) (\S{4}) ([0-9a-f]+) \S+ \S+\s+(.*)$/.exec(line);
    if (fields === null) continue;
    const [, start = "0", end = "0", perms = "", offset = "", path = ""] = fields;
    if (path !== executable) continue;
    const text = perms === "r-xp";
    const headers = perms === "r--p" && /^0+$/.test(offset);
    if (text || headers) found.push([BigInt(`0x${start}`), BigInt(`0x${end}`)]);
  }
  return found;
}

/** malloc_trim(0) on a runtime thread: what a start freed and glibc kept; true if any went. */
export async function trimHeap(): Promise<boolean> {
  return await libc.malloc_trim(0n) === 1;
}

/** Drops the executable's clean pages from this process, on a runtime thread: how many mappings. */
export async function dropExecutablePages(): Promise<number> {
  const mappings = droppableMappings(
    await Deno.readTextFile("/proc/self/maps"),
    await Deno.readLink("/proc/self/exe"),
  );
  const results = await Promise.all(
    mappings.map(([start, end]) => libc.madvise(start, end - start, MADV_DONTNEED)),
  );
  return results.filter((rc) => rc === 0).length;
}
