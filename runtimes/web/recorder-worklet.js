// The microphone's samples, as the audio thread sees them: each 128-frame block of the first channel is
// copied to the page (audio-in.mjs's Recorder), which keeps them until "stop". A worklet, not a
// MediaRecorder: raw float samples, not a lossy codec, reach the features.
class RecorderProcessor extends AudioWorkletProcessor {
  process(inputs) {
    const channel = inputs[0]?.[0];
    if (channel?.length) this.port.postMessage(channel.slice()); // the block's buffer is reused after return
    return true;
  }
}

registerProcessor('tfm-recorder', RecorderProcessor);
