// Iceberg's RESTCatalogServer (its REST catalog test fixture) bound to one address instead of every interface:
// the same catalog, adapter and servlet, served by a Jetty server on ADDRESS:PORT (the environment says which).
// scripts/iceberg_rest.py compiles it against the fixture's jars and runs it.
package org.apache.iceberg.rest;

import java.lang.reflect.Method;
import java.net.InetSocketAddress;
import org.eclipse.jetty.server.Server;
import org.eclipse.jetty.server.handler.gzip.GzipHandler;
import org.eclipse.jetty.servlet.ServletContextHandler;
import org.eclipse.jetty.servlet.ServletHolder;

public class LoopbackRESTCatalogServer {
  public static void main(String[] args) throws Exception {
    RESTCatalogServer fixture = new RESTCatalogServer();
    Method backend = RESTCatalogServer.class.getDeclaredMethod("initializeBackendCatalog");
    backend.setAccessible(true);
    RESTCatalogServer.CatalogContext catalog = (RESTCatalogServer.CatalogContext) backend.invoke(fixture);
    ServletContextHandler context = new ServletContextHandler(ServletContextHandler.NO_SESSIONS);
    context.addServlet(new ServletHolder(new RESTCatalogServlet(new RESTServerCatalogAdapter(catalog))), "/*");
    context.insertHandler(new GzipHandler());
    Server http = new Server(new InetSocketAddress(System.getenv("ADDRESS"), Integer.parseInt(System.getenv("PORT"))));
    http.setHandler(context);
    http.start();
    http.join();
  }
}
