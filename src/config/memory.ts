/**
 * Memory strings ("512m", "2G", "1.5g") in binary units. The same grammar is used for
 * resource requests/limits and for resource caps, so one parser serves both.
 */

/** Digits, an optional fraction, optional whitespace, one unit letter; the whole string. */
export const MEMORY_PATTERN = /^(\d+(?:\.\d+)?)\s*([kmg])$/i;

const UNIT_POWER: Record<string, number> = { k: 1, m: 2, g: 3 };

export function memoryFormatMessage(memory: unknown): string {
  return `Invalid memory format: "${String(memory)}". Expected format like "512m", "2g", or "1024k".`;
}

/**
 * Parse a memory string to bytes, with binary units: "512m" -> 512 * 1024^2,
 * "2G" -> 2 * 1024^3, "1024k" -> 1024 * 1024 (suffix case-insensitive).
 * Fractions are floored to whole bytes ("1.5g" -> 1610612736).
 *
 * @throws Error if the format is invalid
 */
export function parseMemoryString(memory: string): number {
  const match = typeof memory === 'string' ? MEMORY_PATTERN.exec(memory) : null;
  if (!match) throw new Error(memoryFormatMessage(memory));
  const bytes = Math.floor(Number(match[1]) * 1024 ** UNIT_POWER[match[2]!.toLowerCase()]!);
  // A digit string long enough to overflow a double is not a size anyone means; refuse it
  // here rather than hand Infinity to the cap arithmetic.
  if (!Number.isFinite(bytes)) throw new Error(memoryFormatMessage(memory));
  return bytes;
}

/** Whether parseMemoryString would accept the value; for validation without try/catch. */
export function isMemoryString(memory: unknown): memory is string {
  if (typeof memory !== 'string') return false;
  try {
    parseMemoryString(memory);
    return true;
  } catch {
    return false;
  }
}

/** Bytes as a short binary-unit string for summaries: 2147483648 -> "2 GiB". */
export function formatBytes(bytes: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit++;
  }
  const text = Number.isInteger(value) ? String(value) : value.toFixed(1).replace(/\.0$/, '');
  return `${text} ${units[unit]}`;
}
