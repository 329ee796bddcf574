/** Runtime detection, re-exported for the container backend (the code is shared with bare-metal). */
export {
  detectRuntime,
  runtimeOfSocket,
  runtimeProbeOrder,
  socketPathOfHost,
  socketUsable,
  type ContainerRuntime,
  type DetectedRuntime,
  type SocketAccess,
} from '../container-runtime.js';
