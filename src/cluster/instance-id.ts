import { UserError } from '../util/errors.js';

/** Same alphabet as agent ids: it appears in logs, URLs and the instances table. */
const VALID = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;

/**
 * The instance id: `--instance-id`, else KICI_INSTANCE_ID, else the one kept in the data dir
 * (created on first start). Two orchestrators on one database must not share one.
 */
export async function resolveInstanceId(
  flag: string | undefined,
  env: string | undefined,
  fromDataDir: () => Promise<string>,
): Promise<string> {
  const [value, source] = flag ? [flag, '--instance-id'] : env ? [env, 'KICI_INSTANCE_ID'] : [undefined, ''];
  if (value === undefined) return fromDataDir();
  if (!VALID.test(value))
    throw new UserError(
      `${source}: "${value.slice(0, 80)}" is not a valid instance id; use 1-64 letters, digits, ".", "_" or "-", starting with a letter or digit`,
    );
  return value;
}
