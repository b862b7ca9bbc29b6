/** SHA-256 of a file, streamed: node:crypto's incremental hash behind one small module. */

const CHUNK = 1 << 20;

/**
 * The hex SHA-256 of the file's bytes. node:crypto is imported here, on first use, so that
 * only `--verify` pays for Deno's Node compatibility layer.
 */
export async function sha256File(path: string): Promise<string> {
  const { createHash } = await import("node:crypto");
  const hash = createHash("sha256");
  const buffer = new Uint8Array(CHUNK);
  using file = await Deno.open(path, { read: true });
  for (;;) {
    const n = await file.read(buffer);
    if (n === null) break;
    hash.update(buffer.subarray(0, n));
  }
  return hash.digest("hex");
}
