/** A surrogate half without its partner: valid in a JS string, but not encodable as UTF-8. */
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g;

/**
 * Text that any store and any UTF-8 encoder can hold: NUL (which Postgres text refuses) and lone
 * surrogates become U+FFFD.
 */
export function cleanText(s: string): string {
  return s.replaceAll('\0', '\uFFFD').replace(LONE_SURROGATE, '\uFFFD');
}
