import type { ScalerEntry } from '../../../config/index.js';
import { checkLabelSets } from '../../core/label-set-check.js';
import { isJobImageSet } from './job-image.js';

/**
 * What makes `next` unacceptable as a bare-metal scaler's new config. The container runtime and nft
 * of job-image mode are checked when the scaler is built, so a reload cannot add the first job-image
 * set, nor change requireSudo (how nft is run) under running ones.
 */
export function reloadErrors(next: ScalerEntry, current: ScalerEntry, hasJobImage: boolean): string[] {
  const errors = [
    ...checkLabelSets(next.labelSets),
    ...next.labelSets.flatMap((ls, i) =>
      ls.binaryPath || ls.image ? [] : [`labelSets[${i}]: bare-metal label sets need binaryPath or image`],
    ),
    ...next.labelSets.flatMap((ls, i) =>
      isJobImageSet(ls) && !hasJobImage
        ? [
            `labelSets[${i}]: job-image mode (image, no binaryPath) needs a container runtime and usable nft checked at start-up; restart the orchestrator to add one`,
          ]
        : [],
    ),
  ];
  if (hasJobImage && next.requireSudo !== current.requireSudo)
    errors.push('requireSudo: cannot change on a reload while job-image label sets run (restart instead)');
  if (next.type !== 'bare-metal') errors.push(`type: a bare-metal backend cannot take a ${next.type} entry`);
  return errors;
}
