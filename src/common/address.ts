/** Listening addresses: "HOST:PORT", ":PORT" or "[V6]:PORT". */

export interface ListenAddress {
  readonly hostname: string;
  readonly port: number;
}

/** The health endpoint's default address, GOAT's port, on every IPv6 and IPv4 address. */
export const DEFAULT_HEALTH: ListenAddress = Object.freeze({ hostname: "::", port: 7623 });

/** "HOST:PORT", ":PORT" or "[V6]:PORT"; an empty host is "::" (IPv4 too, where IPv6 exists). */
export function parseListenAddress(text: string): ListenAddress {
  const match = /^(?:\[([0-9A-Fa-f:.]+)\]|([A-Za-z0-9.-]*)):(\d{1,5})$/.exec(text.trim());
  const port = match === null ? NaN : Number(match[3]);
  if (match === null || port > 65535) {
    throw new RangeError(`Invalid address "${text}": use HOST:PORT, :PORT or [V6]:PORT`);
  }
  const hostname = match[1] ?? (match[2] === "" || match[2] === undefined ? "::" : match[2]);
  return Object.freeze({ hostname, port });
}

/** "127.0.0.1:7623" or "[::1]:7623". */
export function formatAddress(address: ListenAddress): string {
  const host = address.hostname.includes(":") ? `[${address.hostname}]` : address.hostname;
  return `${host}:${address.port}`;
}
