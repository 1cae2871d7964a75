"""Write hilrig-layout.json, the Foxglove layout of ``hil run --live``, and
hilrig-layout-studio1.json, the same layout in the format of Foxglove Studio 1.x and
Lichtblick (run it after changing the live channels: ``python docs/foxglove/make_layout.py``).

Built with the Foxglove SDK's layout types (foxglove.layouts): the robot in a 3D panel
(the frames and the scene of telemetry.scene, in the fixed frame ``world``), the plots,
the live parameters and the events. The plots read the channels of hilrig.live.foxglove
(CHANNELS); tests/test_live.py checks that every path of the layout names a channel and a
field the live view publishes, and that the 3D panel shows the scene;
tests/test_live_viewer.py opens the Studio 1.x layout in Foxglove Studio 1.48.

Foxglove Studio 1.x and Lichtblick import a layout of another shape than the SDK's (which
current Foxglove reads): ``configById`` (a panel's id, ``Type!suffix``, to its config, the
title as ``foxglovePanelTitle``) and ``layout``, a tree of splits in two (``first``,
``second``, ``direction``, ``splitPercentage``); the 3D panel's type is ``3D`` there. The
panels' configs have the same keys in both (``studio_layout``).
"""
import json
from pathlib import Path

import foxglove.layouts as fl


def plot(title: str, *paths: str) -> fl.PlotPanel:
    series = [fl.PlotSeries(value=p, enabled=True, timestamp_method="receiveTime")
              for p in paths]
    return fl.PlotPanel(title=title, config=fl.PlotConfig(
        paths=series, show_legend=True, legend_display="floating", is_synced=True,
        x_axis_val="timestamp", time_window_mode="sliding", following_view_width=5.0))


def split(direction: str, *panels, proportions=None) -> fl.SplitContainer:
    proportions = proportions or [1] * len(panels)
    return fl.SplitContainer(direction=direction, items=[
        fl.SplitItem(proportion=p, content=c) for p, c in zip(proportions, panels)])


def layout() -> fl.Layout:
    joints = plot("joints q (rad)", "/hil/joint_state.q[0]", "/hil/joint_state.q[1]",
                  "/hil/joint_state.q[2]", "/hil/reference.r[0]", "/hil/reference.r[1]",
                  "/hil/reference.r[2]")
    error = plot("tracking error r - q (rad)", "/hil/tracking_error.e[0]",
                 "/hil/tracking_error.e[1]", "/hil/tracking_error.e[2]",
                 "/hil/tracking_error.norm")
    command = plot("command u (V or N m)", "/hil/command.u[0]", "/hil/command.u[1]",
                   "/hil/command.u[2]")
    timing = plot("timing (s)", "/hil/timing.lateness", "/hil/timing.compute_tick")
    residual = plot("3RRR residual (m^2)", "/hil/diagnostics.residual")
    dets = plot("3RRR determinants", "/hil/diagnostics.det_phi_theta",
                "/hil/diagnostics.det_phi_x")
    events = fl.RawMessagesPanel(title="events",
                                 config=fl.RawMessagesConfig(topic_path="/hil/event",
                                                             expansion="all"))
    robot = fl.ThreeDeePanel(title="robot", config=fl.ThreeDeeConfig(
        fixed_frame="world", follow_tf="world",
        topics={"/hil/scene": fl.BaseRendererSceneUpdateTopicSettings(visible=True)},
        camera_state=fl.ThreeDeeCameraState(distance=3.5, phi=50, theta_offset=30,
                                            target=(0.6, 0.35, 0.0))))
    side = split("column", fl.ParametersPanel(title="live parameters"), events)
    plots = split("column", joints, error, split("row", command, timing),
                  split("row", residual, dets))
    return fl.Layout(content=split("row", robot, plots, side, proportions=[2, 2, 1]))


STUDIO_PANEL_TYPE = {"ThreeDee": "3D"}   # the SDK's panel type -> Studio 1.x's, where they differ


def studio_layout(sdk_layout: dict) -> dict:
    """The SDK's layout (its JSON, as written to hilrig-layout.json) in Foxglove Studio
    1.x's and Lichtblick's format: a split of n items becomes n - 1 splits in two, each
    taking its first item's share of what is left (``splitPercentage``, in %)."""
    config_by_id: dict[str, dict] = {}

    def convert(node: dict):
        if node["type"] == "panel":
            kind = STUDIO_PANEL_TYPE.get(node["panelType"], node["panelType"])
            panel_id = f"{kind}!hil{len(config_by_id)}"
            config_by_id[panel_id] = {**node.get("config", {}),
                                      "foxglovePanelTitle": node.get("title", kind)}
            return panel_id
        items = [(item["proportion"], convert(item["content"])) for item in node["items"]]
        tree = items[-1][1]
        rest = items[-1][0]
        for proportion, first in reversed(items[:-1]):
            rest += proportion
            tree = {"first": first, "second": tree, "direction": node["direction"],
                    "splitPercentage": 100.0 * proportion / rest}
        return tree

    tree = convert(sdk_layout["content"])
    return {"configById": config_by_id, "globalVariables": {}, "userNodes": {},
            "playbackConfig": {"speed": 1.0}, "layout": tree}


def write(name: str, doc: dict) -> None:
    out = Path(__file__).with_name(name)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    sdk = json.loads(layout().to_json())
    write("hilrig-layout.json", sdk)
    write("hilrig-layout-studio1.json", studio_layout(sdk))
