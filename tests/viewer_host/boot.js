// Renders Foxglove Studio 1.48's App (exported by @foxglove/studio-base onto self) as
// Studio's own web entry does, with its Foxglove WebSocket and MCAP data sources, an
// app configuration and a layout storage in memory, the storage holding one layout:
// layout.json beside this file (id "hilrig"). Open it with
//   index.html?ds=foxglove-websocket&ds.url=ws://127.0.0.1:8765&layoutId=hilrig
"use strict";

class MemoryConfiguration {
  constructor() { this.values = new Map(); this.listeners = new Map(); }
  get(key) { return this.values.get(key); }
  async set(key, value) {
    this.values.set(key, value);
    for (const listener of this.listeners.get(key) ?? []) { listener(value); }
  }
  addChangeListener(key, listener) {
    if (!this.listeners.has(key)) { this.listeners.set(key, new Set()); }
    this.listeners.get(key).add(listener);
  }
  removeChangeListener(key, listener) { this.listeners.get(key)?.delete(listener); }
}

class MemoryLayoutStorage {
  constructor(layouts) { this.layouts = new Map(layouts.map((l) => [l.id, l])); }
  async list(_namespace) { return [...this.layouts.values()]; }
  async get(_namespace, id) { return this.layouts.get(id); }
  async put(_namespace, layout) { this.layouts.set(layout.id, layout); return layout; }
  async delete(_namespace, id) { this.layouts.delete(id); }
  async importLayouts() {}
}

async function boot() {
  const data = await (await fetch("layout.json")).json();
  const layout = {
    id: "hilrig", name: "hilrig", permission: "CREATOR_WRITE",
    baseline: { data, savedAt: new Date().toISOString() },
    working: undefined, syncInfo: undefined,
  };
  await self.initI18n();
  const app = React.createElement(self.App, {
    deepLinks: [window.location.href],
    appConfiguration: new MemoryConfiguration(),
    dataSources: [new self.FoxgloveWebSocketDataSourceFactory(), new self.McapLocalDataSourceFactory()],
    layoutStorage: new MemoryLayoutStorage([layout]),
    extensionLoaders: [],
    enableLaunchPreferenceScreen: false,
    enableGlobalCss: true,
  });
  ReactDOM.render(app, document.getElementById("root"));
}

boot().catch((error) => { console.error("hilrig viewer host:", error); });
