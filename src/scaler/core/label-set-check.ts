import { labelSchema, normalizeLabelSet, type LabelSetConfig } from '../../config/index.js';

/**
 * The label-set rules every backend's reload check applies, whatever else it checks. The config
 * loader enforces them too; a backend checks again because a reload hands it the entry directly.
 */
export function checkLabelSets(labelSets: readonly Pick<LabelSetConfig, 'labels'>[]): string[] {
  if (labelSets.length === 0) return ['labelSets: at least one label set is needed'];
  const errors: string[] = [];
  const seen = new Map<string, number>();
  labelSets.forEach((ls, i) => {
    if (ls.labels.length === 0) errors.push(`labelSets[${i}].labels: at least one label is needed`);
    ls.labels.forEach((label, j) => {
      const r = labelSchema.safeParse(label);
      if (!r.success) errors.push(`labelSets[${i}].labels[${j}]: ${r.error.issues[0]!.message}`);
    });
    const key = normalizeLabelSet(ls.labels);
    const first = seen.get(key);
    if (first !== undefined) errors.push(`labelSets[${i}]: same labels as labelSets[${first}] ([${key}])`);
    else seen.set(key, i);
  });
  return errors;
}
