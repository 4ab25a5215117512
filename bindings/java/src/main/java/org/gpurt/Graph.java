package org.gpurt;

import com.sun.jna.Pointer;
import com.sun.jna.ptr.PointerByReference;

/** A captured graph (Stream.endCapture). */
public final class Graph extends Owner {
    Graph(Pointer handle) {
        super(handle, NativeLib.C::gpurt_graph_destroy);
    }

    /** An executable graph, uploaded on `stream`. */
    public Exec instantiate(Stream stream) {
        PointerByReference e = new PointerByReference();
        run(g -> NativeLib.C.gpurt_graph_instantiate(g, 0, stream.handle(), e), stream);
        return new Exec(e.getValue());
    }

    /** An instantiated graph. */
    public static final class Exec extends Owner {
        private Exec(Pointer handle) {
            super(handle, NativeLib.C::gpurt_graph_exec_destroy);
        }

        public void launch(Stream stream) {
            run(e -> NativeLib.C.gpurt_graph_launch(e, stream.handle()), stream);
        }
    }
}
