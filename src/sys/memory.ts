/**
 * The runtime's code pages that start-up touched count in this process's RSS, and so in the OOM
 * killer's choice. Once denit runs they are mostly idle: dropping them from its page tables
 * (MADV_DONTNEED) leaves them as clean page cache, so a child that grows past a memory limit,
 * not denit, is the pick. Only mappings the loader never writes are dropped (a written private
 * page would lose what was written).
 */

import { libc } from "./symbols.ts";

const MADV_DONTNEED = 4; // asm-generic/mman-common.h

export interface Drop {
  readonly mappings: number;
}

/**
 * The executable's mappings that may be dropped, from /proc/self/maps: its text (r-xp) and its
 * first read-only segment (r--p at offset 0: ELF headers and read-only data). Never the other
 * read-only ones: RELRO (r--p just before the data) holds pages the loader wrote.
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

/**
 * The heap's free pages back to the kernel (malloc_trim(0), on a thread of the runtime): what a
 * start allocated and freed, which glibc would otherwise keep; true if any went back.
 */
export async function trimHeap(): Promise<boolean> {
  return await libc.malloc_trim(0n) === 1;
}

/** Drops the executable's clean pages from this process, on a thread of the runtime. */
export async function dropExecutablePages(): Promise<Drop> {
  const mappings = droppableMappings(
    await Deno.readTextFile("/proc/self/maps"),
    await Deno.readLink("/proc/self/exe"),
  );
  const results = await Promise.all(
    mappings.map(([start, end]) => libc.madvise(start, end - start, MADV_DONTNEED)),
  );
  return { mappings: results.filter((rc) => rc === 0).length };
}
