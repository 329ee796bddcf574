/**
 * How the tables' columns are typed for Kysely, shared by every table file: what is written and
 * what is read back differ for timestamps and JSON.
 */
import type { ColumnType } from 'kysely';

/** Timestamps are written as Date (or left to a default) and always read back as Date. */
export type Timestamp = ColumnType<Date, Date | string | undefined, Date | string>;
export type NullableTimestamp = ColumnType<
  Date | null,
  Date | string | null | undefined,
  Date | string | null
>;
/** JSONB columns: written as a JSON string, read back parsed. */
export type Json<T> = ColumnType<T, string, string>;
