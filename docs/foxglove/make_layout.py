"""Write hilrig-layout.json, the Foxglove layout of ``hil run --live`` (run it after
changing the live channels: ``python docs/foxglove/make_layout.py``).

Built with the Foxglove SDK's layout types (foxglove.layouts): the robot in a 3D panel
(the frames and the scene of telemetry.scene, in the fixed frame ``world``), the plots,
the live parameters and the events. The plots read the channels of hilrig.live.foxglove
(CHANNELS); tests/test_live.py checks that every path of the layout names a channel and a
field the live view publishes, and that the 3D panel shows the scene.
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


if __name__ == "__main__":
    out = Path(__file__).with_name("hilrig-layout.json")
    out.write_text(json.dumps(json.loads(layout().to_json()), indent=1) + "\n")
    print(f"wrote {out}")
