/**
 * Checks across scalers that the schema cannot see one entry at a time: a label set
 * served by two scalers (routing would be ambiguous) and two scalers with one name
 * (names key every map, label and metric).
 */
import { normalizeLabelSet } from './labels.js';

export interface LabelSetOverlap {
  /** The normalised label set. */
  labels: string;
  /** The scaler that declared it first. */
  scaler1: string;
  scaler2: string;
}

/** An overlap with the position of the second declaration, for error lines. */
export interface LocatedLabelSetOverlap extends LabelSetOverlap {
  scalerIndex: number;
  labelSetIndex: number;
}

export interface ScalerLabelSetsLike {
  name: string;
  labelSets: readonly { labels: readonly string[] }[];
}

export function findLabelSetOverlaps(scalers: readonly ScalerLabelSetsLike[]): LocatedLabelSetOverlap[] {
  const firstOwner = new Map<string, string>();
  const seenPairs = new Set<string>();
  const overlaps: LocatedLabelSetOverlap[] = [];
  scalers.forEach((scaler, scalerIndex) => {
    scaler.labelSets.forEach((set, labelSetIndex) => {
      const labels = normalizeLabelSet(set.labels);
      const owner = firstOwner.get(labels);
      if (owner === undefined) {
        firstOwner.set(labels, scaler.name);
        return;
      }
      // The same set twice inside one scaler is allowed; across scalers, report each pair once.
      const pair = JSON.stringify([labels, owner, scaler.name]);
      if (owner === scaler.name || seenPairs.has(pair)) return;
      seenPairs.add(pair);
      overlaps.push({ labels, scaler1: owner, scaler2: scaler.name, scalerIndex, labelSetIndex });
    });
  });
  return overlaps;
}

/** Label sets declared (normalised) by more than one scaler, in declaration order. */
export function detectLabelSetOverlaps(scalers: readonly ScalerLabelSetsLike[]): LabelSetOverlap[] {
  return findLabelSetOverlaps(scalers).map(({ labels, scaler1, scaler2 }) => ({ labels, scaler1, scaler2 }));
}

export function formatLabelSetOverlap(o: LabelSetOverlap): string {
  return `Label set [${o.labels}] overlaps between scalers "${o.scaler1}" and "${o.scaler2}"`;
}

export interface DuplicateScalerName {
  name: string;
  /** Every index of `scalers` using the name, ascending. */
  indices: number[];
}

export function findDuplicateScalerNames(scalers: readonly { name: string }[]): DuplicateScalerName[] {
  const byName = new Map<string, number[]>();
  scalers.forEach((s, i) => byName.set(s.name, [...(byName.get(s.name) ?? []), i]));
  return [...byName]
    .filter(([, indices]) => indices.length > 1)
    .map(([name, indices]) => ({ name, indices }));
}
